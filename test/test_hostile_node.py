"""Hostile input against a running node over DDS, property-based: while a robot driver
publishes good cameras and joint states, a second publisher sends hypothesis-drawn bad ones
on the same topics (images that lie about their size, step, encoding or bytes; joint states
with NaN, inf, duplicate or missing names) and asks questions that are empty, huge or full
of control bytes. The node keeps its chunk rate (against the rate measured just before in
the same run), no chunk comes from a hostile message (they carry a marker stamp), each kind
of bad input has its log line (throttled, not one per message), every bad question gets its
error, and the node's memory stays flat.

Run by pytest; this file is also the driver peer program.
"""
import time

import pytest

from node_harness import start_node  # noqa: F401 - pytest fixture
from ros_helpers import run_as_peer, run_peers

MARK_SEC = 7                 # the stamp second of every hostile message
EXAMPLES = 80


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def hostile_run(namespace, node_pid, *, deadline):
    from builtin_interfaces.msg import Time
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image, JointState

    from hostile_inputs import QUESTIONS, joint_state_ok, joint_states, raw_images
    from node_driver import CAMERA_TOPICS, JOINTS, Driver
    from oxygen_ros.node.convert import InputError, image_to_rgb

    pid = int(node_pid)
    d = Driver(namespace)
    image_pub = d.node.create_publisher(Image, f"{namespace}/{CAMERA_TOPICS[0]}", qos_profile_sensor_data)
    joint_pub = d.node.create_publisher(JointState, f"{namespace}/joint_states", qos_profile_sensor_data)
    sent = {"images": 0, "joints": 0}
    questions = []
    try:
        d.wait_until(lambda: len(d.chunks) >= 5, 40.0, "the first chunks (autostart)")
        d.ask("what have you done?", timeout_s=20.0)                       # the service is warm
        t0 = time.monotonic()
        time.sleep(3.0)
        before = {"chunks": d.chunks_since(t0), "s": time.monotonic() - t0, "rss_mb": _rss_mb(pid)}

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(raw_images(), joint_states(JOINTS), st.one_of(st.none(), QUESTIONS))
        def one(image_case, joints, question):
            image, _ = image_case
            try:
                image_to_rgb(image)
            except InputError:                               # only what is bad: a good one is a frame
                image.header.stamp = Time(sec=MARK_SEC)
                image_pub.publish(image)
                sent["images"] += 1
            if not joint_state_ok(joints, JOINTS):
                joints.header.stamp = Time(sec=MARK_SEC)
                joint_pub.publish(joints)
                sent["joints"] += 1
            # a ROS string ends at its first NUL: the node gets (and judges) the text before it
            collapsed = " ".join((question or "").split("\x00", 1)[0].split())
            if question is not None and (not collapsed or len(collapsed) > 20_000
                                         or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in collapsed)):
                questions.append((question, d.ask_async(question, timeout_s=5.0)))
            time.sleep(0.05)

        t1 = time.monotonic()
        one()
        during = {"chunks": d.chunks_since(t1), "s": time.monotonic() - t1}
        d.wait_until(lambda: all(f.done() for _, f in questions), 30.0, "replies to the hostile questions")
        time.sleep(1.0)
        return {"before": before, "during": during, "rss_after_mb": _rss_mb(pid), "sent": sent,
                "replies": [(f.result().success, f.result().error, repr(q[:60]) + f" ({len(q)} chars)")
                            for q, f in questions],
                "chunk_stamps": [m.header.stamp.sec for _, m in list(d.chunks)],
                "finite": all(all(abs(x) < 1e6 for p in m.points for x in p.positions) for _, m in list(d.chunks)),
                "inputs": d.diag_values_after(time.monotonic(), "inputs")}
    finally:
        d.close()


@pytest.mark.ros
def test_hostile_inputs_change_nothing(start_node):
    node = start_node(autostart=True)
    r = run_peers(__file__, {"driver": ["hostile_run", node.namespace, str(node.proc.pid)]}, timeout=150)["driver"]
    before, during = r["before"], r["during"]
    rate_before, rate_during = before["chunks"] / before["s"], during["chunks"] / during["s"]
    assert rate_during >= 0.7 * rate_before, (rate_before, rate_during)
    assert MARK_SEC not in r["chunk_stamps"] and r["finite"]
    assert r["sent"]["images"] >= EXAMPLES // 4 and r["sent"]["joints"] >= EXAMPLES // 4, r["sent"]
    assert r["replies"], r["sent"]
    accepted = [reply for reply in r["replies"] if reply[0] or not reply[1]]    # (ok, error, question)
    assert not accepted, accepted
    rejected = {kind: sum(int(v) for k, v in r["inputs"].items() if kind in k and k.endswith(" rejected"))
                for kind in ("image_raw", "joint_states")}
    # counted by the node (best-effort sensor QoS may drop a few on a loaded machine)
    assert r["sent"]["images"] >= rejected["image_raw"] >= r["sent"]["images"] // 2, (rejected, r["sent"])
    assert r["sent"]["joints"] >= rejected["joint_states"] >= r["sent"]["joints"] // 2, (rejected, r["sent"])
    log = node.log()
    images, joints = log.count("image rejected:"), log.count("joint state rejected:")
    # one clear line per input per throttle period (2 s), not one per message
    limit = during["s"] / 2.0 + 3
    assert 1 <= images <= limit and 1 <= joints <= limit, (images, joints, limit)
    assert r["rss_after_mb"] - before["rss_mb"] < 40, (before["rss_mb"], r["rss_after_mb"])
    assert node.alive() and "Traceback" not in log


if __name__ == "__main__":
    run_as_peer({"hostile_run": hostile_run})
