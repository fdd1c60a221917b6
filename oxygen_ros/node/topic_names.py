"""How oxygen_node names a topic parameter's topic, ROS-free: for its own robot as ROS
resolves a node's names, for a fleet robot under /ROBOT/. The node uses robot_topic for its
fleet robots; tools (the SROS2 policy) use both to name what the node opens."""
from __future__ import annotations


def node_topic(namespace: str, node: str, topic: str) -> str:
    """`topic` as a node `node` in `namespace` resolves it (absolute, relative or ~/private)."""
    ns = namespace.rstrip("/")
    if topic.startswith("/"):
        return topic
    if topic.startswith("~"):
        return f"{ns}/{node}/{topic[1:].lstrip('/')}"
    return f"{ns}/{topic}"


def robot_topic(robot: str, node: str, topic: str) -> str:
    """A fleet robot's topic: relative names under /ROBOT/, private ones under /ROBOT/NODE/;
    ValueError for an absolute name (it would be shared by every robot)."""
    if topic.startswith("/"):
        raise ValueError(f"topic {topic} is absolute: a fleet robot's topics are relative to its "
                         f"namespace /{robot}/ (or set {robot}.<parameter> to another relative name)")
    return node_topic(f"/{robot}", node, topic)
