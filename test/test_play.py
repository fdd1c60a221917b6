"""Record and replay with compressed cameras: `oxygen demo --compressed jpeg --record-cameras`
(tiny model) writes a bag with the camera frames and joint states; `oxygen play` of that bag
drives a fresh oxygen_node, which publishes action chunks from it.

Every bound is a count of events or comes from a rate measured in the same test, so a loaded
machine (slower sim, slower frames) changes the figures, not the verdict: the demo runs at a
given rate (its own measurement of the machine picked 0.1 Hz under load: two chunks), the
replay is counted from the first to the last played frame (play is started by the counting
peer once it is subscribed, not after a fixed sleep), and the rate limit is checked on the
gaps between recorded frames against the sim's rate as an unlimited recorder saw it.

Run by pytest; this file is also the peer program that plays the bag and counts the chunks.
"""
import signal
import statistics
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
LIMIT_S = 600.0      # only a safety net against a hang: no bound below depends on it


def play_and_count(namespace, bag, rate, *, deadline):
    """Subscribe to the node's chunks and frame timing and to one played camera, start `oxygen
    play` once the chunk subscription matched the node, spin until play exits; chunks counted
    between the first and the last played frame this peer received."""
    import rclpy
    from oxygen_msgs.msg import FrameTiming
    from sensor_msgs.msg import CompressedImage
    from trajectory_msgs.msg import JointTrajectory

    from oxygen_ros.node import qos
    from ros_helpers import peer_env, spin_until, unique_name

    rclpy.init()
    node = rclpy.create_node(unique_name("play_counter"))
    chunks, frame_ms, cams = [], [], []
    sub = node.create_subscription(JointTrajectory, f"{namespace}/joint_trajectory",
                                   lambda m: chunks.append(time.monotonic()), qos.CONTROL)
    node.create_subscription(FrameTiming, f"{namespace}/frame_timing", lambda m: frame_ms.append(m.total_ms),
                             qos.CONTROL)
    node.create_subscription(CompressedImage, f"{namespace}/camera/base/image_raw/compressed",
                             lambda m: cams.append(time.monotonic()), qos.SENSOR)
    limit = time.monotonic() + LIMIT_S
    spin_until(node, lambda: sub.get_publisher_count() > 0, limit, "the node's trajectory publisher")
    play = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "play", bag, "--rate", rate,
                             "--namespace", namespace], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env=peer_env())
    try:
        spin_until(node, lambda: play.poll() is not None, limit, "oxygen play to end")
        played, _ = play.communicate()
    except TimeoutError:
        play.kill()
        raise
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return {"play_rc": play.returncode, "played": played, "cams": len(cams),
            "window_s": cams[-1] - cams[0] if cams else 0.0,
            "chunks": len([t for t in chunks if cams and cams[0] <= t <= cams[-1]]),
            "frame_ms_p50": statistics.median(frame_ms) if frame_ms else None}


def _run(cmd, timeout=LIMIT_S) -> tuple[int, str]:
    """Run a CLI command to its end; on a hang SIGINT it (it stops its own children: a SIGKILL
    left the demo's sim, recorder and node running and loading every later test)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=peer_env())
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"{cmd[3]} still running after {timeout:.0f} s:\n{out[-4000:]}")
    return proc.returncode, out


def _played_counts(output: str) -> dict:
    """`oxygen play`'s last line: "played: /topic N, /topic N"."""
    line = next(line for line in output.splitlines() if line.startswith("played: "))
    return {t: int(n) for t, n in (item.rsplit(" ", 1) for item in line.removeprefix("played: ").split(", "))}


def test_demo_bag_with_compressed_cameras_plays_into_a_fresh_node(tmp_path, start_node):
    out = tmp_path / "demo"
    # --rate: the test is about the cameras, and the demo's own measurement picks the rate
    # from the machine's load at that moment (0.1 Hz under load: two chunks in 8 s)
    rc, output = _run([sys.executable, "-m", "oxygen_ros.cli", "demo", "--params", "config/tiny.yaml",
                       "--out", str(out), "--duration", "8", "--rate", "10", "--compressed", "jpeg",
                       "--record-cameras"])
    assert rc == 0, output
    params = yaml.safe_load((out / "params.yaml").read_text())["/**"]["ros__parameters"]
    assert all(t.endswith("/compressed") for t in params["camera_topics"]), params["camera_topics"]
    meta = yaml.safe_load((out / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    topics = {t["topic_metadata"]["name"]: (t["topic_metadata"]["type"], t["message_count"])
              for t in meta["topics_with_message_count"]}
    cams = {t: n for t, (ty, n) in topics.items() if ty == "sensor_msgs/msg/CompressedImage"}
    assert set(cams) == {"/" + t for t in params["camera_topics"]}, topics
    assert all(n > 0 for n in cams.values()) and topics["/joint_states"][1] > 0, topics
    # every frame of the demo's node is in the bag with its chunk (the last frame's timing
    # may be cut off by the stop)
    frames, chunks = topics["/frame_timing"][1], topics["/joint_trajectory"][1]
    assert frames > 0 and chunks - frames in (0, 1), topics
    assert "compressed cameras decoded with" in (out / "logs" / "node.log").read_text()

    node = start_node(autostart=True, camera_topics=params["camera_topics"])
    end = time.monotonic() + LIMIT_S
    while "active:" not in node.log():             # the node's subscriptions exist: play may start
        assert node.alive() and time.monotonic() < end, node.log()
        time.sleep(0.1)
    r = run_peers(__file__, {"player": ["play_and_count", node.namespace, str(out / "bag"), "2"]},
                  timeout=LIMIT_S)["player"]
    assert r["play_rc"] == 0, r["played"]
    assert f"{node.namespace}/camera/base/image_raw/compressed" in r["played"], r["played"]
    # play publishes every recorded input message
    assert _played_counts(r["played"]) == {f"{node.namespace}{t}": n for t, (ty, n) in topics.items()
                                           if ty in ("sensor_msgs/msg/CompressedImage",
                                                     "sensor_msgs/msg/JointState")}, (r["played"], topics)
    # A chunk on about every tick while frames were played, at the rate this machine held: a
    # frame starts every period, or when one overran, at the next tick within half a period
    # of its end (node/tick_clock.py): at most frame + period apart. Half of that at least.
    period_s = 1.0 / params["control_rate_hz"]
    assert r["frame_ms_p50"] is not None, r
    expected = r["window_s"] / (period_s + r["frame_ms_p50"] / 1e3)
    print(f"replay: {r['chunks']} chunks over {r['window_s']:.1f} s of played frames, frame p50 "
          f"{r['frame_ms_p50']:.0f} ms: at least {max(3, expected / 2):.0f} expected")
    assert r["chunks"] >= max(3, expected / 2), (r, expected)
    assert node.alive() and "image rejected" not in node.log()


def _gaps(times_ns: list) -> list:
    return [(b - a) / 1e9 for a, b in zip(times_ns, times_ns[1:])]


def test_record_cameras_compresses_raw_cameras_at_the_rate_limit(tmp_path):
    """`oxygen sim` publishing raw rgb8 (10 Hz asked: the MuJoCo renders cost ~20 ms each),
    `oxygen record --cameras --camera-hz 4` beside an unlimited one (`--camera-hz 0`, which
    measures the rate the sim really holds): each camera is in the limited bag as JPEG on
    <topic>/compressed, at most 4 frames a second over the bag, on average at most a sim
    frame or two after the limit allowed the next; decoding to the sim's image size;
    the joint states are all there (as many as the unlimited recorder got)."""
    from rosbags.rosbag2 import Reader

    from oxygen_ros.node.convert import compressed_to_rgb
    from oxygen_ros.tools.bag_types import typestore

    cli = [sys.executable, "-m", "oxygen_ros.cli"]
    sim_log = tmp_path / "sim.log"
    sim = subprocess.Popen([*cli, "sim", "--params", "config/tiny.yaml", "--image-size", "96", "--camera-hz", "10",
                            "--quiet"], stdout=open(sim_log, "w"), stderr=subprocess.STDOUT, cwd=ROOT,
                           env=peer_env())
    try:
        end = time.monotonic() + LIMIT_S
        while "sim: " not in sim_log.read_text():            # publishing: the recorders' 5 s are the sim's
            assert sim.poll() is None and time.monotonic() < end, sim_log.read_text()
            time.sleep(0.1)
        recs = {hz: subprocess.Popen([*cli, "record", "--out", str(tmp_path / f"bag{hz}"), "--params",
                                      "config/tiny.yaml", "--cameras", "--camera-hz", hz, "--duration", "5",
                                      "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=ROOT, env=peer_env())
                for hz in ("4", "0")}
        outputs = {hz: rec.communicate(timeout=LIMIT_S)[0] for hz, rec in recs.items()}
    finally:
        sim.terminate()
        sim.wait(timeout=60)
    for hz, rec in recs.items():
        assert rec.returncode == 0, outputs[hz]

    def read(bag):
        with Reader(bag) as reader:
            cams = {c.topic: c for c in reader.connections if c.msgtype == "sensor_msgs/msg/CompressedImage"}
            times = {t: [ts for _, ts, _ in reader.messages(connections=[c])] for t, c in cams.items()}
            joints = sum(c.msgcount for c in reader.connections if c.topic == "/joint_states")
            _, _, raw = next(reader.messages(connections=list(cams.values())[:1]))
        return times, joints, raw

    limited, joints, raw = read(tmp_path / "bag4")
    every, joints_every, _ = read(tmp_path / "bag0")
    assert sorted(limited) == [f"/camera/{v}/image_raw/compressed" for v in ("base", "left_wrist", "right_wrist")]
    for topic, times in limited.items():
        sim_hz = (len(every[topic]) - 1) / ((every[topic][-1] - every[topic][0]) / 1e9)
        gaps = _gaps(times)
        assert len(gaps) >= 2, (topic, len(times), sim_hz)
        # the limit: a frame is stamped in the bag after its JPEG encoding, whose time varies
        # under load, so a single gap may look shorter; the count over the span may not
        assert len(gaps) <= 4 * sum(gaps) + 1, (topic, len(gaps), sum(gaps))
        assert min(gaps) > 0.25 / 2, (topic, min(gaps))          # never two at the sim's 10 Hz
        print(f"{topic}: {len(times)} frames at {len(gaps) / sum(gaps):.2f} Hz (limit 4), min gap "
              f"{min(gaps):.3f} s; the sim held {sim_hz:.1f} Hz")
        # frames not dropped beyond it: the next frame after the limit, or the one after
        assert statistics.mean(gaps) <= 0.25 + 2 / sim_hz, (topic, statistics.mean(gaps), sim_hz)
    assert joints > 0 and joints >= 0.8 * joints_every, (joints, joints_every)   # every message
    msg = typestore().deserialize_cdr(raw, "sensor_msgs/msg/CompressedImage")
    assert msg.format == "jpeg" and compressed_to_rgb(msg).shape == (96, 96, 3)


if __name__ == "__main__":
    run_as_peer({"play_and_count": play_and_count})
