"""Record and replay with compressed cameras: `oxygen demo --compressed jpeg --record-cameras`
(tiny model) writes a bag with the camera frames and joint states; `oxygen play` of that bag
drives a fresh oxygen_node, which publishes action chunks from it.

Run by pytest; this file is also the peer program that counts the fresh node's chunks.
"""
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from node_harness import start_node  # noqa: F401 - pytest fixture
from ros_helpers import peer_env, run_as_peer, run_peers

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]


def count_chunks(namespace, seconds, *, deadline):
    import rclpy
    from trajectory_msgs.msg import JointTrajectory

    from oxygen_ros.node import qos
    from ros_helpers import unique_name

    rclpy.init()
    node = rclpy.create_node(unique_name("chunk_counter"))
    chunks = []
    node.create_subscription(JointTrajectory, f"{namespace}/joint_trajectory", chunks.append, qos.CONTROL)
    end = time.monotonic() + float(seconds)
    while time.monotonic() < min(end, deadline - 1.0):
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.try_shutdown()
    return {"chunks": len(chunks)}


def test_demo_bag_with_compressed_cameras_plays_into_a_fresh_node(tmp_path, start_node):
    out = tmp_path / "demo"
    demo = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "demo", "--params", "config/tiny.yaml",
                           "--out", str(out), "--duration", "8", "--compressed", "jpeg", "--record-cameras"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                          env=peer_env(), timeout=150)
    assert demo.returncode == 0, demo.stdout
    params = yaml.safe_load((out / "params.yaml").read_text())["/**"]["ros__parameters"]
    assert all(t.endswith("/compressed") for t in params["camera_topics"]), params["camera_topics"]
    meta = yaml.safe_load((out / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    topics = {t["topic_metadata"]["name"]: (t["topic_metadata"]["type"], t["message_count"])
              for t in meta["topics_with_message_count"]}
    cams = {t: n for t, (ty, n) in topics.items() if ty == "sensor_msgs/msg/CompressedImage"}
    assert set(cams) == {"/" + t for t in params["camera_topics"]}, topics
    assert all(n >= 10 for n in cams.values()), cams          # ~5 Hz x 8 s, rate-limited
    assert topics["/joint_states"][1] > 50, topics
    assert topics["/joint_trajectory"][1] >= 10, topics
    assert "compressed cameras decoded with" in (out / "logs" / "node.log").read_text()

    node = start_node(autostart=True, camera_topics=params["camera_topics"])
    time.sleep(3.0)                       # the tiny model loads in about a second
    play = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "play", str(out / "bag"),
                             "--rate", "2", "--namespace", node.namespace],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=peer_env())
    try:
        r = run_peers(__file__, {"counter": ["count_chunks", node.namespace, 6.0]}, timeout=30)["counter"]
        played, _ = play.communicate(timeout=30)
    finally:
        if play.poll() is None:
            play.kill()
    assert play.returncode == 0, played
    assert f"{node.namespace}/camera/base/image_raw/compressed" in played, played
    assert r["chunks"] >= 10, (r, played)
    assert node.alive() and "image rejected" not in node.log()


def test_record_cameras_compresses_raw_cameras_at_the_rate_limit(tmp_path):
    """`oxygen sim` publishing raw rgb8 (10 Hz: the MuJoCo renders cost ~20 ms each), `oxygen
    record --cameras --camera-hz 4`: each camera is in the bag as JPEG on <topic>/compressed,
    about 4 frames a second, decoding to the sim's image size; the joint states are all there."""
    from rosbags.rosbag2 import Reader

    from oxygen_ros.node.convert import compressed_to_rgb
    from oxygen_ros.tools.bag_types import typestore

    cli = [sys.executable, "-m", "oxygen_ros.cli"]
    sim = subprocess.Popen([*cli, "sim", "--params", "config/tiny.yaml", "--image-size", "96", "--camera-hz", "10",
                            "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                           env=peer_env())
    try:
        rec = subprocess.run([*cli, "record", "--out", str(tmp_path / "bag"), "--params", "config/tiny.yaml",
                              "--cameras", "--camera-hz", "4", "--duration", "5", "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                             env=peer_env(), timeout=60)
    finally:
        sim.terminate()
        sim.communicate(timeout=20)
    assert rec.returncode == 0, rec.stdout
    store = typestore()
    with Reader(tmp_path / "bag") as reader:
        cams = [c for c in reader.connections if c.msgtype == "sensor_msgs/msg/CompressedImage"]
        assert sorted(c.topic for c in cams) == [f"/camera/{v}/image_raw/compressed"
                                                 for v in ("base", "left_wrist", "right_wrist")]
        for c in cams:
            assert 12 <= c.msgcount <= 22, (c.topic, c.msgcount)     # 4 Hz x 5 s, not the sim's 10 Hz
        _, _, raw = next(reader.messages(connections=cams[:1]))
        joints = [c for c in reader.connections if c.topic == "/joint_states"]
        assert joints and joints[0].msgcount > 150                   # every message (100 Hz asked)
    msg = store.deserialize_cdr(raw, "sensor_msgs/msg/CompressedImage")
    assert msg.format == "jpeg" and compressed_to_rgb(msg).shape == (96, 96, 3)


if __name__ == "__main__":
    run_as_peer({"count_chunks": count_chunks})
