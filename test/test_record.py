"""`oxygen record`: lossless at the control rate, a standard rosbag2 bag, clean stop.

A publisher peer plays oxygen_node's outputs (300 action chunks at 40 Hz, text chunks on
narration/memory/answer, frame timing, diagnostics), each message numbered; the bag is
read back with rosbags and, independently, with mcap + mcap-ros2-support (which knows
oxygen_msgs only from the definitions stored in the bag).
"""
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from ros_helpers import peer_env, run_as_peer, run_peers, unique_name

pytestmark = pytest.mark.ros
N_CHUNKS, N_TEXT, N_LATCHED = 300, 60, 5


# ------------------------------------------------------------------ peer (publisher)

def publish(namespace, marker, deadline):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from oxygen_msgs.msg import FrameTiming, TextChunk
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from ros_helpers import spin_until

    rclpy.init()
    node = rclpy.create_node(unique_name("fake_oxygen_node"))
    rel = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    latched = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    ns = namespace
    pubs = {"traj": node.create_publisher(JointTrajectory, f"{ns}/joint_trajectory", rel),
            "timing": node.create_publisher(FrameTiming, f"{ns}/frame_timing", rel),
            "narration": node.create_publisher(TextChunk, f"{ns}/narration", rel),
            "memory": node.create_publisher(TextChunk, f"{ns}/memory", latched),
            "answer": node.create_publisher(TextChunk, f"{ns}/answer", rel),
            "diag": node.create_publisher(DiagnosticArray, "/diagnostics", rel)}

    def text(stream, i):
        return TextChunk(stream=stream, request_id=i, start_frame=i, delta=f"{stream} {i} ",
                         token_count=i + 1, done=i % 4 == 3, full_text=f"{stream} {i}" * (i % 4 == 3))

    # memory entries before the recorder exists: transient-local must still deliver them
    for i in range(N_LATCHED):
        pubs["memory"].publish(text("memory", i))
    Path(marker).write_text("published")
    spin_until(node, lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), deadline,
               "the recorder's subscriptions")
    period = 1.0 / 40
    t_next = time.monotonic()
    for i in range(N_CHUNKS):
        traj = JointTrajectory(joint_names=["a", "b"])
        traj.header.frame_id = str(i)
        traj.header.stamp = node.get_clock().now().to_msg()
        traj.points = [JointTrajectoryPoint(positions=[float(i), 0.5]) for _ in range(10)]
        pubs["traj"].publish(traj)
        pubs["timing"].publish(FrameTiming(frame_index=i, total_ms=12.0, period_ms=25.0))
        if i < N_TEXT:
            pubs["narration"].publish(text("narration", i))
            pubs["answer"].publish(text("answer", i))
            pubs["memory"].publish(text("memory", N_LATCHED + i))
        if i % 40 == 0:
            pubs["diag"].publish(DiagnosticArray(status=[DiagnosticStatus(name="x", message=str(i))]))
        t_next += period
        time.sleep(max(0.0, t_next - time.monotonic()))
    for name, pub in pubs.items():
        if not pub.wait_for_all_acked(rclpy.duration.Duration(seconds=max(0.5, deadline - time.monotonic()))):
            raise TimeoutError(f"{name}: not all messages acknowledged")
    rate = N_CHUNKS / (time.monotonic() - (t_next - N_CHUNKS * period))
    node.destroy_node()
    rclpy.shutdown()
    return {"rate_hz": rate}


# ------------------------------------------------------------------ parent side

class Recorder:
    """`oxygen record` in a subprocess; its output lines are collected by a thread."""

    def __init__(self, out: Path, namespace: str, *extra):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oxygen_ros.cli", "record", "--out", str(out), "--namespace",
             namespace, "--quiet", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=peer_env())
        self.lines = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()
        end = time.monotonic() + 30
        while not any(line.startswith("recording ") for line in list(self.lines)):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.proc.kill()
                self._reader.join(timeout=5)
                raise AssertionError("the recorder did not start:\n" + "".join(self.lines))
            time.sleep(0.05)

    def wait_for_line(self, start: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not any(line.startswith(start) for line in list(self.lines)):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise AssertionError(f"the recorder printed no {start!r} line:\n" + "".join(self.lines))
            time.sleep(0.05)

    def stop(self, sig=signal.SIGINT, timeout=15.0) -> str:
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=5)
        out = "".join(self.lines)
        assert self.proc.returncode == 0, out
        return out


def record_while_publishing(tmp_path, sig, *extra):
    ns = "/" + unique_name("rec")
    marker = tmp_path / "latched_published"
    bag = tmp_path / "bag"
    results = {}
    peer = threading.Thread(target=lambda: results.update(
        run_peers(__file__, {"pub": ["publish", ns, marker]}, timeout=60.0)))
    peer.start()
    t_end = time.monotonic() + 30
    while not marker.exists() and peer.is_alive() and time.monotonic() < t_end:
        time.sleep(0.05)
    rec = Recorder(bag, ns, *extra)
    try:
        peer.join(timeout=70)
    finally:
        out = rec.stop(sig)
    assert "pub" in results, "the publisher peer failed (see the output above)"
    assert "bag closed" in out, out
    return ns, bag, results["pub"]


def _expected(ns):
    return {f"{ns}/joint_trajectory": set(map(str, range(N_CHUNKS))),
            f"{ns}/frame_timing": set(range(N_CHUNKS)),
            f"{ns}/narration": set(range(N_TEXT)),
            f"{ns}/answer": set(range(N_TEXT)),
            f"{ns}/memory": set(range(N_LATCHED + N_TEXT))}


def _key(topic, msg):
    if topic.endswith("joint_trajectory"):
        return msg.header.frame_id
    if topic.endswith("frame_timing"):
        return msg.frame_index
    return msg.request_id


def test_record_is_lossless_and_readable_by_rosbags_and_mcap(tmp_path):
    """Every one of 300 chunks at 40 Hz, 180 text chunks (5 of them latched before the
    recorder started), the timing and diagnostics are in the bag, found by two readers."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory
    from rosbags.highlevel import AnyReader

    from oxygen_ros.tools.bag_types import typestore

    ns, bag, pub = record_while_publishing(tmp_path, signal.SIGINT)
    assert pub["rate_hz"] > 30.0
    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["storage_identifier"] == "mcap"
    counts = {t["topic_metadata"]["name"]: t["message_count"] for t in meta["topics_with_message_count"]}
    expected = _expected(ns)
    for topic, keys in expected.items():
        assert counts[topic] == len(keys), (topic, counts)
    assert counts["/diagnostics"] >= N_CHUNKS // 40
    types = {t["topic_metadata"]["name"]: t["topic_metadata"]["type"] for t in meta["topics_with_message_count"]}
    assert types[f"{ns}/narration"] == "oxygen_msgs/msg/TextChunk"
    assert types["/parameter_events"] == "rcl_interfaces/msg/ParameterEvent"    # every node's changes

    # rosbags
    got = {t: set() for t in expected}
    with AnyReader([bag], default_typestore=typestore()) as reader:
        for conn, _, raw in reader.messages():
            if conn.topic in got:
                got[conn.topic].add(_key(conn.topic, reader.deserialize(raw, conn.msgtype)))
    assert got == expected

    # mcap + mcap-ros2-support: only the schemas stored in the file
    mcap_files = list(bag.glob("*.mcap"))
    assert len(mcap_files) == 1
    got = {t: set() for t in expected}
    with open(mcap_files[0], "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for _, channel, _, msg in reader.iter_decoded_messages():
            if channel.topic in got:
                got[channel.topic].add(_key(channel.topic, msg))
        summary = reader.get_summary()
        schemas = {s.name: s.encoding for s in summary.schemas.values()}
    assert got == expected
    assert schemas["oxygen_msgs/msg/TextChunk"] == "ros2msg"


def test_record_stops_on_sigterm_and_writes_sqlite3(tmp_path):
    """SIGTERM closes the bag too; --storage sqlite3 writes the ros2 bag default storage."""
    from rosbags.rosbag2 import Reader

    ns, bag, _ = record_while_publishing(tmp_path, signal.SIGTERM, "--storage", "sqlite3")
    with Reader(bag) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
    assert counts[f"{ns}/joint_trajectory"] == N_CHUNKS
    assert list(bag.glob("*.db3"))
    from oxygen_ros.tools.bag_read import read_bag    # the report reads it too
    from oxygen_ros.tools.bag_summary import summarize

    summary = summarize(read_bag(bag))
    assert summary["chunks"]["count"] == summary["frames"]["count"] == N_CHUNKS
    assert summary["chunks"]["achieved_rate_hz"] > 30.0
    assert summary["language"]["requests"] == N_LATCHED + 3 * N_TEXT


def test_record_refuses_an_existing_bag(tmp_path):
    (tmp_path / "bag").mkdir()
    (tmp_path / "bag" / "x").write_text("keep me")
    r = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "record", "--out", str(tmp_path / "bag")],
                       capture_output=True, text=True, env=peer_env(), timeout=30)
    assert r.returncode == 2 and "exists" in r.stderr
    assert (tmp_path / "bag" / "x").read_text() == "keep me"


if __name__ == "__main__":
    run_as_peer({"publish": publish})
