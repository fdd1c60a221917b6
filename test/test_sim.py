"""`oxygen sim` (the MuJoCo Panda): joints follow the received chunks; the cameras show the
robot moving, each at its own rate. The first tests run the trajectory loop on the fast
2-D fake (test/fake_world.py); the ROS test runs the real simulator."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ros_helpers import peer_env, run_as_peer, run_peers, unique_name

JOINTS = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "joint_7", "gripper"]


def world():
    from fake_world import FakeWorld

    return FakeWorld(["a", "b", "c", "gripper"], [-1.0, -2.0, -1.0, 0.0], [1.0, 2.0, 1.0, 0.08])


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


def test_a_params_file_without_the_pandas_8_joints_fails_at_start_naming_them():
    out = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "sim", "--joints", "a,b,c,gripper",
                          "--duration", "1", "--quiet"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    assert "panda_joint1..panda_joint7, panda_finger_width" in out.stderr and "got 4" in out.stderr, out


# ------------------------------------------------------------------ over ROS

CAMERA_HZ = {"base": 10.0, "left_wrist": 5.0, "right_wrist": 5.0}
COUNT_S = 3.0


def drive(namespace, deadline):
    """Play oxygen_node: count each camera's images over a few seconds, publish a stale chunk
    and a current one (a ramp to a goal), watch the joint states move there."""
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
    for cam in CAMERA_HZ:
        node.create_subscription(Image, f"{namespace}/camera/{cam}/image_raw",
                                 lambda m, c=cam: images.setdefault(c, []).append(image_to_rgb(m)),
                                 qos_profile_sensor_data)
    pub = node.create_publisher(JointTrajectory, f"{namespace}/joint_trajectory",
                                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    spin_until(node, lambda: states and len(images) == 3 and pub.get_subscription_count() > 0, deadline,
               "joint states, three cameras and the sim's trajectory subscription")
    n0, t0 = {c: len(v) for c, v in images.items()}, time.monotonic()
    spin_until(node, lambda: time.monotonic() - t0 >= COUNT_S, deadline, "the camera count window")
    rates = {c: (len(images[c]) - n0[c]) / (time.monotonic() - t0) for c in images}

    first = {c: v[-1] for c, v in images.items()}
    start = np.array(states[-1].position)
    goal = np.array([0.8, -0.9, 1.0, -1.0, 0.5, 1.5, 0.3, 0.02])
    # a ramp over 1 s, as a chunk would be: the actuators follow it, no lunge
    points = [JointTrajectoryPoint(positions=(start + (goal - start) * (k + 1) / 10).tolist(),
                                   time_from_start=Duration(nanosec=100_000_000 * (k + 1)))
              for k in range(10)]
    # stamped on the shared ROS clock: one that ended 10 s ago (rejected), then one from now
    now = node.get_clock().now()
    stale = JointTrajectory(joint_names=JOINTS, points=points)
    stale.header.stamp = (now - rclpy.duration.Duration(seconds=10.0)).to_msg()
    pub.publish(stale)
    msg = JointTrajectory(joint_names=JOINTS, points=points)
    msg.header.stamp = now.to_msg()
    pub.publish(msg)
    moving = len(states)

    def reached():    # the physics settles on the target: gravity held by the actuators
        q = np.array(states[-1].position)
        return bool(np.all(np.abs(q[:7] - goal[:7]) < 0.01) and abs(q[7] - goal[7]) < 0.005)

    spin_until(node, reached, deadline, "the joints to reach the chunk's goal")
    speed = max(float(np.abs(m.velocity[:7]).max()) for m in states[moving:])
    n = {c: len(v) for c, v in images.items()}
    spin_until(node, lambda: all(len(images[c]) > n[c] for c in n), deadline, "images after the move")
    diff = {c: float(np.abs(images[c][-1].astype(int) - first[c]).mean()) for c in first}
    node.destroy_node()
    rclpy.shutdown()
    return {"start": start.tolist(), "names": list(states[-1].name), "diff": diff, "rates": rates,
            "velocities": len(states[-1].velocity), "speed": speed, "shape": list(images["base"][-1].shape)}


@pytest.mark.ros
def test_sim_follows_chunks_over_ros_and_stops_on_sigint():
    """The MuJoCo arm moves to a chunk's goal (and moved: velocities published), each camera
    publishes at its own rate (within 30% when the machine lets it keep up), and it starts
    without a display."""
    ns = "/" + unique_name("sim")
    env = peer_env()
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL"):     # the default (EGL) must do
        env.pop(name, None)
    rates = ",".join(f"{hz:g}" for hz in CAMERA_HZ.values())
    sim = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "sim", "--params", "config/tiny.yaml",
                            "--namespace", ns, "--image-size", "64", "--camera-hz", rates, "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        result = run_peers(__file__, {"driver": ["drive", ns]}, timeout=60.0)["driver"]
    finally:
        sim.send_signal(signal.SIGINT)
        out, _ = sim.communicate(timeout=15)
    assert sim.returncode == 0, out
    assert "stopped after 1 chunks" in out and "1 trajectories rejected" in out, out
    assert "Traceback" not in out and not os.path.exists("MUJOCO_LOG.TXT"), out
    assert result["names"] == JOINTS and result["shape"] == [64, 64, 3] and result["velocities"] == 8
    assert result["speed"] > 0.1, result
    # A busy machine renders fewer images than asked (a late camera goes next, no catch-up
    # burst): the lower bound scales with the share of the asked renders the sim managed.
    rates = result["rates"]
    kept_up = min(1.0, sum(rates.values()) / sum(CAMERA_HZ.values()))
    for cam, hz in CAMERA_HZ.items():
        assert 0.5 * hz * kept_up <= rates[cam] <= 1.3 * hz, rates
        assert rates["base"] >= 0.9 * rates[cam], rates     # the faster camera is never behind
    if kept_up > 0.9:        # the sim kept up: each camera at its own rate
        assert all(0.7 * hz <= rates[cam] for cam, hz in CAMERA_HZ.items()), rates
    for cam, d in result["diff"].items():
        assert d > 1.0, (cam, result["diff"])


if __name__ == "__main__":
    run_as_peer({"drive": drive})
