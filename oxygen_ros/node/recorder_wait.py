"""Which awaited recorders (`await_recorders`) do not subscribe to a robot's outputs yet.

A recorder sees its readers match the node's publishers (its `get_publisher_count`), but
DDS matches each pair on both sides separately: on a loaded machine the node's writers
learnt of the recorder's readers up to a few hundred ms later, and the frames published
in between never reached the bag. Only the node's side tells, so the node asks its own
graph (the same discovery data its writers match from) before its first frame.
"""
from __future__ import annotations

from .topic_names import node_topic


def missing_recorders(node, robots) -> dict[str, list[str]]:
    """Robot name -> ['/ns/oxygen_recorder on /ns/frame_timing', ...] for the awaited
    recorders that the node's graph does not show subscribed to one of that robot's
    outputs yet (its trajectories, frame timing and text, and /diagnostics); robots
    missing nothing are left out. Relative recorder names live in the robot's namespace
    (a fleet robot's /NAME, else the node's)."""
    missing = {}
    for rt in robots:
        namespace = f"/{rt.name}" if rt.name else node.get_namespace()
        wanted = [node_topic(namespace, "", n) for n in rt.p.get("await_recorders") or []]   # ROS's rule
        if not wanted:
            continue
        topics = [pub.topic_name for key, pub in rt.pubs.items() if not key.startswith("view:")]
        gaps = []
        for topic in [*topics, "/diagnostics"]:
            present = {node_topic(i.node_namespace, "", i.node_name)
                       for i in node.get_subscriptions_info_by_topic(topic)}
            gaps += [f"{name} on {topic}" for name in wanted if name not in present]
        if gaps:
            missing[rt.name] = gaps
    return missing
