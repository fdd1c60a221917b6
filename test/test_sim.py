"""`oxygen sim`: joints follow the received chunks; the cameras show the robot moving."""
import signal
import subprocess
import sys

import numpy as np
import pytest

from ros_helpers import peer_env, run_as_peer, run_peers, unique_name

JOINTS = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "joint_7", "gripper"]


def world():
    from oxygen_ros.tools.sim_world import SimWorld

    return SimWorld(["a", "b", "c", "gripper"], [-1.0, -2.0, -1.0, 0.0], [1.0, 2.0, 1.0, 0.08])


def test_joints_track_the_command_rate_limited_within_the_limits():
    """Each step moves a joint at most speed * range * dt toward the command (1.5 ranges a
    second: a moves 1.5 * 2 * 0.01 = 0.03); commands are clipped to the limits."""
    w = world()
    w.command([0.5, 1.0, -0.5, 0.04])
    w.step(0.01)
    assert np.allclose(w.q, [0.03, 0.06, -0.03, 0.0012])
    for _ in range(200):
        w.step(0.01)
    assert np.allclose(w.q, [0.5, 1.0, -0.5, 0.04])
    w.command([5.0, -5.0, 5.0, 1.0])
    for _ in range(300):
        w.step(0.01)
    assert np.allclose(w.q, [1.0, -2.0, 1.0, 0.08]) and np.allclose(w.commanded, w.q)


def test_joints_follow_a_chunk_through_the_trajectory_executor():
    """The sim's control loop: sample the executor at 100 Hz, command the world; the joints
    reach the chunk's last point and hold it."""
    from oxygen_ros.tools.trajectory_executor import TrajectoryExecutor

    w = world()
    ex = TrajectoryExecutor(w.names, w.q)
    pts = [[0.1 * k, 0.2 * k, -0.1 * k, 0.04] for k in range(1, 6)]
    ex.receive(w.names, 0.0, [0.1 * k for k in range(1, 6)], pts, now=10.0)
    for i in range(1, 201):
        w.command(ex.sample(10.0 + 0.01 * i)[0])
        w.step(0.01)
    assert np.allclose(w.q, pts[-1], atol=1e-6)


def test_the_cameras_see_the_arm_move_and_the_cube_follow_a_closed_gripper():
    w = world()
    before = {v: w.render(v, 96) for v in ("base", "left_wrist", "right_wrist")}
    assert all(im.shape == (96, 96, 3) and im.dtype == np.uint8 for im in before.values())
    # bring the gripper onto the cube: search the first three joints for the closest pose
    best = min(((a, b, c) for a in np.linspace(-1, 1, 9) for b in np.linspace(-2, 2, 9)
                for c in np.linspace(-1, 1, 9)),
               key=lambda q: np.linalg.norm(_tip(w, q) - w.cube))
    target = [*best, 0.0]                                   # gripper closed
    w.command(target)
    for _ in range(400):
        w.step(0.01)
    assert w.held is not None, (best, _tip(w, best), w.cube)
    cube = w.cube.copy()
    w.command([best[0] - 0.5, best[1], best[2], 0.0])                       # lift it away
    for _ in range(400):
        w.step(0.01)
    assert np.linalg.norm(w.cube - cube) > 0.05
    after = {v: w.render(v, 96) for v in before}
    for v in before:
        assert np.abs(after[v].astype(int) - before[v]).mean() > 1.0, v


def _tip(w, q):
    saved = w.q.copy()
    w.q[:3] = q
    tip = w.arm_points()[-1]
    w.q = saved
    return tip


# ------------------------------------------------------------------ over ROS

def drive(namespace, deadline):
    """Play oxygen_node: publish a stale chunk and a current one, watch joint states and images."""
    import rclpy
    from builtin_interfaces.msg import Duration
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image, JointState
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from oxygen_ros.node.convert import image_to_rgb
    from ros_helpers import spin_until

    rclpy.init()
    node = rclpy.create_node(unique_name("fake_node"))
    states, images = [], {}
    node.create_subscription(JointState, f"{namespace}/joint_states", states.append, qos_profile_sensor_data)
    for cam in ("base", "left_wrist", "right_wrist"):
        node.create_subscription(Image, f"{namespace}/camera/{cam}/image_raw",
                                 lambda m, c=cam: images.setdefault(c, []).append(image_to_rgb(m)),
                                 qos_profile_sensor_data)
    pub = node.create_publisher(JointTrajectory, f"{namespace}/joint_trajectory",
                                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    spin_until(node, lambda: states and len(images) == 3 and pub.get_subscription_count() > 0, deadline,
               "joint states, three cameras and the sim's trajectory subscription")
    first = {c: v[-1] for c, v in images.items()}
    start = list(states[-1].position)
    goal = [0.8, -0.9, 1.0, -1.0, 0.5, 1.5, 0.3, 0.02]
    points = [JointTrajectoryPoint(positions=goal, time_from_start=Duration(nanosec=100_000_000 * (k + 1)))
              for k in range(10)]
    # stamped on the shared ROS clock: one that ended 10 s ago (rejected), then one from now
    now = node.get_clock().now()
    stale = JointTrajectory(joint_names=JOINTS, points=points)
    stale.header.stamp = (now - rclpy.duration.Duration(seconds=10.0)).to_msg()
    pub.publish(stale)
    msg = JointTrajectory(joint_names=JOINTS, points=points)
    msg.header.stamp = now.to_msg()
    pub.publish(msg)

    def reached():
        return bool(states) and np.allclose(states[-1].position, goal, atol=1e-3)

    spin_until(node, reached, deadline, "the joints to reach the chunk's points")
    n = {c: len(v) for c, v in images.items()}
    spin_until(node, lambda: all(len(images[c]) > n[c] for c in n), deadline, "images after the move")
    diff = {c: float(np.abs(images[c][-1].astype(int) - first[c]).mean()) for c in first}
    node.destroy_node()
    rclpy.shutdown()
    return {"start": start, "names": list(states[-1].name), "diff": diff,
            "shape": list(images["base"][-1].shape)}


@pytest.mark.ros
def test_sim_follows_chunks_over_ros_and_stops_on_sigint():
    ns = "/" + unique_name("sim")
    sim = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "sim", "--params", "config/tiny.yaml",
                            "--namespace", ns, "--image-size", "64", "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=peer_env())
    try:
        result = run_peers(__file__, {"driver": ["drive", ns]}, timeout=40.0)["driver"]
    finally:
        sim.send_signal(signal.SIGINT)
        out, _ = sim.communicate(timeout=15)
    assert sim.returncode == 0, out
    assert "stopped after 1 chunks" in out and "1 trajectories rejected" in out, out
    assert result["names"] == JOINTS and result["shape"] == [64, 64, 3]
    for cam, d in result["diff"].items():
        assert d > 1.0, (cam, result["diff"])


if __name__ == "__main__":
    run_as_peer({"drive": drive})
