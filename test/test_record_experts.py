"""`oxygen record` and the bag summary with several action experts: the further experts'
trajectory topics come from the params file (expert_trajectory_topics, else
joint_trajectory/<expert name> of the params' model) or --expert-topic; the summary keeps
the first expert's trajectories as the main ones and counts each further expert's apart.

The real run: a qwen3vl-multi-tiny node (as in test_node_multi_expert.py) and `oxygen
record --params <the node's params file>` over DDS (isolation: test/conftest.py), into a
real MCAP bag read back with read_bag/summarize.
"""
import subprocess
import sys

import pytest
import yaml

from node_harness import node_processes, start_node  # noqa: F401 - pytest fixture
from ros_helpers import peer_env, run_as_peer, run_peers
from test_node_multi_expert import BASE, HANDS
from test_record import Recorder

MULTI = {"model": "qwen3vl-multi-tiny"}     # further experts: hands, base


def _params_file(tmp_path, params: dict):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    return path


# ------------------------------------------------------------------ topic names (no ROS)

def test_expert_topics_from_the_params_file(tmp_path):
    from oxygen_ros.tools.bag_recorder import expert_topics, ros2_bag_command, topics
    from oxygen_ros.tools.params_files import params_from_file

    # no entries: the node's default joint_trajectory/<expert name>, in the model's order
    assert expert_topics(params_from_file(_params_file(tmp_path, MULTI))) == \
        ["joint_trajectory/hands", "joint_trajectory/base"]
    # an empty entry keeps the default; a missing one too
    params = params_from_file(_params_file(tmp_path, {**MULTI, "expert_trajectory_topics": ["", "/base/cmd"]}))
    assert expert_topics(params) == ["joint_trajectory/hands", "/base/cmd"]
    assert expert_topics({**MULTI, "expert_trajectory_topics": ["hands/cmd"]}) == \
        ["hands/cmd", "joint_trajectory/base"]
    # --expert-topic adds to them (once each); without params only those
    assert expert_topics(params, ["/base/cmd", "wheels"]) == ["joint_trajectory/hands", "/base/cmd", "wheels"]
    assert expert_topics(None, ["wheels"]) == ["wheels"]
    # a one-expert model has none, whatever the entries say (the node ignores them too)
    assert expert_topics({"model": "tiny", "expert_trajectory_topics": ["x"]}) == []
    assert expert_topics({}) == []          # the node's default model: tiny
    with pytest.raises(ValueError, match="unknown model profile"):
        expert_topics({"model": "nope"})

    # relative names follow the namespace, absolute ones do not; the main topic stays first
    names = [name for name, _ in topics("/robot", params, expert_topics(params, ["/base/cmd"]))]
    assert names[0] == "/robot/joint_trajectory"
    assert names[-2:] == ["/robot/joint_trajectory/hands", "/base/cmd"]
    assert len(names) == len(set(names))
    assert ros2_bag_command("B", "/robot", experts=expert_topics(params)).endswith(
        "/diagnostics /parameter_events /robot/tf /robot/joint_trajectory/hands /base/cmd")


def test_record_refuses_an_unknown_model_in_the_params(tmp_path):
    r = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "record", "--out", str(tmp_path / "bag"),
                        "--params", str(_params_file(tmp_path, {"model": "nope"}))],
                       capture_output=True, text=True, env=peer_env(), timeout=60)
    assert r.returncode == 2 and "unknown model profile 'nope'" in r.stderr, r.stderr
    assert not (tmp_path / "bag").exists()


def test_main_trajectory_topic_without_the_recorders_custom_data():
    """Bags from `ros2 bag record`: the topic names decide, else the busiest, said so."""
    from oxygen_ros.tools.bag_read import main_trajectory_topic

    assert main_trajectory_topic({}) == (None, None)
    assert main_trajectory_topic({"/r/arm_cmd": 3}) == ("/r/arm_cmd", None)
    assert main_trajectory_topic({"/r/joint_trajectory/hands": 9, "/r/joint_trajectory": 3,
                                  "/r/base/cmd": 9}) == ("/r/joint_trajectory", None)
    main, note = main_trajectory_topic({"/r/arm": 30, "/r/hands": 12})
    assert main == "/r/arm" and "most" in note
    custom = {"oxygen.trajectory_topic": "/r/arm", "oxygen.expert_trajectory_topics": "/r/hands"}
    assert main_trajectory_topic({"/r/arm": 1, "/r/hands": 12}, custom) == ("/r/arm", None)


# ------------------------------------------------------------------ a real run

def drive(namespace, *topics, deadline):
    """The robot's inputs until every expert published 5 chunks (peer)."""
    from node_driver import Driver

    d = Driver(namespace, trajectory_topics=topics)
    try:
        d.wait_until(lambda: len(d.chunks) >= 5 and all(len(c) >= 5 for c in d.expert_chunks.values()),
                     40.0, "5 chunks on every expert's topic")
        return {"chunks": len(d.chunks)}
    finally:
        d.close()


@pytest.mark.ros
def test_record_and_summarise_every_experts_trajectories(start_node, tmp_path):  # noqa: F811
    from oxygen_ros.tools.bag_read import read_bag
    from oxygen_ros.tools.bag_summary import summarize
    from oxygen_ros.tools.bag_summary_text import format_summary

    node = start_node(autostart=True, model="qwen3vl-multi-tiny",
                      expert_joint_names=[",".join(HANDS), ",".join(BASE)],
                      expert_joint_lower_limits=[0.0] * 4 + [-1.0, -3.0],
                      expert_joint_upper_limits=[1.0] * 4 + [1.0, 3.0],
                      expert_trajectory_topics=["", "base/cmd_trajectory"])
    bag = tmp_path / "bag"
    rec = Recorder(bag, node.namespace, "--params", str(node.params_file))
    hands, base = node.topic("joint_trajectory/hands"), node.topic("base/cmd_trajectory")
    try:
        recording = next(line for line in rec.lines if line.startswith("recording "))
        assert hands in recording and base in recording, recording
        run_peers(__file__, {"driver": ["drive", node.namespace, "joint_trajectory/hands",
                                        "base/cmd_trajectory"]}, timeout=60)
    finally:
        out = rec.stop()
    assert "bag closed" in out, out

    data = read_bag(bag)
    main = node.topic("joint_trajectory")
    assert data.trajectory_topic == main and data.trajectory_note is None
    assert set(data.expert_trajectories) == {hands, base}
    for topic, joints in ((hands, HANDS), (base, BASE)):
        assert data.topics[topic][1] > 0, data.topics
        assert {tuple(t[1]) for t in data.expert_trajectories[topic]} == {tuple(joints)}
    # the main list holds only the first expert's trajectories (its own joints)
    assert data.trajectories and len(data.trajectories) == len(data.chunks) == data.topics[main][1]
    assert {tuple(t[1]) for t in data.trajectories}.isdisjoint({tuple(HANDS), tuple(BASE)})

    s = summarize(data)
    ex = s["experts"]
    assert ex["trajectory_topic"] == main and ex["first"]["count"] == s["chunks"]["count"]
    for topic in (hands, base):
        assert ex["by_topic"][topic]["count"] == data.topics[topic][1]
        assert ex["by_topic"][topic]["receive_latency_ms"]["p50"] >= 0.0
    text = format_summary(s)
    assert f"  expert {hands}: {ex['by_topic'][hands]['count']} chunks" in text, text
    assert f"expert {base}: " in text, text


if __name__ == "__main__":
    run_as_peer({"drive": drive})
