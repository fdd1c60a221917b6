"""`oxygen sim` publishes its ground truth on /tf (issue 41's contract): parent `world`,
children `cube`, `bowl` and `gripper` (the fingertips' centre), metres, stamped on the
sim's clock; `oxygen record` records /tf by default; `oxygen report` scores the bag: the
cube's place over time and the episode's success, in summary.json. Real MuJoCo, real DDS."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ros_helpers import peer_env, run_as_peer, run_peers, unique_name

SEED = 5


def listen(namespace, deadline):
    """Take /tf for 2 s: every transform's parents, children and positions, and how far
    its stamp is from this peer's ROS clock when it arrives."""
    import rclpy
    from tf2_msgs.msg import TFMessage

    from ros_helpers import spin_until

    rclpy.init()
    node = rclpy.create_node(unique_name("tf_listener"))
    got = []

    def on_tf(msg):
        now = node.get_clock().now().nanoseconds * 1e-9
        for t in msg.transforms:
            s = t.header.stamp.sec + t.header.stamp.nanosec * 1e-9
            p, q = t.transform.translation, t.transform.rotation
            got.append((t.header.frame_id, t.child_frame_id, s, now - s, [p.x, p.y, p.z], [q.w, q.x, q.y, q.z]))

    node.create_subscription(TFMessage, f"{namespace}/tf", on_tf, 100)
    spin_until(node, lambda: got, deadline, "a /tf message")
    t0 = time.monotonic()
    spin_until(node, lambda: time.monotonic() - t0 > 2.0, deadline, "2 s of /tf")
    node.destroy_node()
    rclpy.shutdown()
    return got


@pytest.mark.ros
def test_sim_publishes_ground_truth_on_tf_recorded_and_scored(tmp_path):
    from oxygen_ros.tools import panda_scene as ps

    ns = "/" + unique_name("simtf")
    env = peer_env()
    bag = tmp_path / "bag"
    sim = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "sim", "--params", "config/tiny.yaml",
                            "--namespace", ns, "--image-size", "32", "--camera-hz", "2", "--seed", str(SEED),
                            "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    rec = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "record", "--namespace", ns, "--out", str(bag),
                            "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        got = run_peers(__file__, {"listener": ["listen", ns]}, timeout=60.0)["listener"]
    finally:
        rec.send_signal(signal.SIGINT)
        rec_out, _ = rec.communicate(timeout=20)
        sim.send_signal(signal.SIGINT)
        sim_out, _ = sim.communicate(timeout=20)
    assert sim.returncode == 0 and "Traceback" not in sim_out, sim_out
    assert rec.returncode == 0, rec_out

    assert {(p, c) for p, c, *_ in got} == {("world", "cube"), ("world", "bowl"), ("world", "gripper")}
    lay = ps.layout(SEED)
    last = {c: (pos, quat) for _, c, _, _, pos, quat in got}
    assert np.allclose(last["cube"][0], [*lay.cube_xy, ps.CUBE_REST_Z], atol=3e-3)      # metres
    assert np.allclose(last["bowl"][0], [*lay.bowl_xy, ps.TABLE_TOP], atol=1e-6)
    assert abs(last["gripper"][0][2] - (ps.TABLE_TOP + 0.47)) < 0.03      # READY: fingertips ~47 cm up
    for _, _, _, _, _, quat in got:
        assert abs(np.linalg.norm(quat) - 1.0) < 1e-6
    stamps = [s for _, c, s, _, _, _ in got if c == "cube"]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))               # one stamp per publication, rising
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    assert 5.0 <= rate <= 35.0, rate                                     # the sim's tf rate, 20 Hz asked
    assert max(age for *_, age, _, _ in got) < 1.0                      # the sim's clock = the ROS clock here

    report = tmp_path / "report"
    out = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "report", str(bag), "--out", str(report)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    task = json.loads((report / "summary.json").read_text())["task"]
    assert task["success"] is False and task["final_place"] == "table"
    assert [s["place"] for s in task["places"]] == ["table"] and task["tf_messages"] > 10
    assert "cube: table" in out.stdout and "success: no" in out.stdout, out.stdout
    assert not os.path.exists("MUJOCO_LOG.TXT")


if __name__ == "__main__":
    run_as_peer({"listen": listen})
