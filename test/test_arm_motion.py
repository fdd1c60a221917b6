"""The arm's measured motion beside its command (tools/arm_motion.py), and in the report.

One joint, joint states at 100 Hz for 2 s. Trajectory A (received at 0, stamp 0) runs
from 0 to 1 rad at t = 1 s and 2 rad at t = 2 s: 1 rad/s. Trajectory B replaces it at
t = 1 s and goes back to 0 rad at t = 2 s: -1 rad/s. By hand, with the 0.1 s window:
the commanded velocity changes from +1 to -1 (change 2.0), and 0.1 s after the switch
the command is at 0.9 rad where the old course would have been at 1.1: deviation 0.2.
"""
import numpy as np
import pytest

from oxygen_ros.tools.arm_motion import WINDOW_S, track

A = (0.0, ["j"], 0.0, [1.0, 2.0], [[1.0], [2.0]], None)
B = (1.0, ["j"], 0.0, [1.0], [[0.0]], None)
T = np.arange(201) / 100.0


def command_on_grid():
    from oxygen_ros.tools.arm_motion import commanded

    q, v, accepted = commanded([A, B], ["j"], [0.0], T)
    return q[:, 0], v[:, 0], accepted


def states(q, v=None, names=("j",)):
    return [(float(t), list(names), [float(x)], [] if v is None else [float(y)]) for t, x, y in
            zip(T, q, v if v is not None else q)]


def test_the_command_replays_both_trajectories():
    q, v, accepted = command_on_grid()
    assert accepted == [0.0, 1.0]
    assert q[50] == pytest.approx(0.5) and v[50] == pytest.approx(1.0)
    assert q[150] == pytest.approx(0.5) and v[150] == pytest.approx(-1.0)


def test_a_perfect_tracker_scores_as_its_command():
    q, v, _ = command_on_grid()
    s = track([A, B], states(q, v)).summary()
    assert s["tracking_error"]["rms"] == pytest.approx(0.0, abs=1e-12)
    assert s["switches"]["actual"] == s["switches"]["commanded"]
    c = s["switches"]["commanded"]
    assert c["count"] == 1 and s["window_s"] == WINDOW_S == 0.1
    assert c["velocity_change_max"] == pytest.approx(2.0, abs=1e-9)
    assert c["course_deviation_max"] == pytest.approx(0.2, abs=1e-9)


def test_a_lagging_arm_softens_the_switch_and_shows_tracking_error():
    """A first-order lag (time constant 50 ms) stands in for the arm's inertia."""
    q_cmd, _, _ = command_on_grid()
    q = np.zeros_like(q_cmd)
    for i in range(1, len(q)):
        q[i] = q[i - 1] + (0.01 / 0.05) * (q_cmd[i] - q[i - 1])
    v = np.gradient(q, T)
    s = track([A, B], states(q, v)).summary()
    actual, cmd = s["switches"]["actual"], s["switches"]["commanded"]
    assert 0.5 < actual["velocity_change_max"] < cmd["velocity_change_max"] == pytest.approx(2.0)
    assert 0.0 < actual["course_deviation_max"] < cmd["course_deviation_max"]
    # at 1 rad/s a 50 ms lag trails by about 0.05 rad
    assert 0.02 < s["tracking_error"]["rms"] < 0.08
    assert s["velocities"] == "measured"


def test_missing_velocities_are_differenced_and_missing_joints_give_nothing():
    q, _, _ = command_on_grid()
    s = track([A, B], states(q)).summary()
    assert s["velocities"] == "finite differences"
    assert s["switches"]["actual"]["velocity_change_max"] == pytest.approx(2.0, abs=0.25)
    assert track([A, B], states(q, names=("other",))) is None
    assert track([], states(q)) is None


def test_the_report_scores_the_joint_states_of_a_bag(tmp_path):
    from rosbags.rosbag2 import StoragePlugin, Writer

    from oxygen_ros.tools.bag_read import read_bag
    from oxygen_ros.tools.bag_summary import summarize
    from oxygen_ros.tools.bag_summary_text import format_summary
    from oxygen_ros.tools.bag_types import typestore

    store = typestore()
    M = store.types
    Time, Duration = M["builtin_interfaces/msg/Time"], M["builtin_interfaces/msg/Duration"]

    def header(t):
        sec = int(t)
        return M["std_msgs/msg/Header"](stamp=Time(sec=sec, nanosec=int(round((t - sec) * 1e9))), frame_id="")

    t0 = 100.0
    q, v, _ = command_on_grid()
    empty = np.zeros(0)
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as w:
        traj = w.add_connection("/joint_trajectory", "trajectory_msgs/msg/JointTrajectory", typestore=store)
        js = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=store)
        for received, names, _, tfs, positions, _ in (A, B):
            points = [M["trajectory_msgs/msg/JointTrajectoryPoint"](
                positions=np.array(p), velocities=empty, accelerations=empty, effort=empty,
                time_from_start=Duration(sec=int(tf), nanosec=int(round((tf % 1) * 1e9)))) for tf, p in zip(tfs, positions)]
            msg = M["trajectory_msgs/msg/JointTrajectory"](header=header(0.0), joint_names=names, points=points)
            w.write(traj, int((t0 + received) * 1e9), store.serialize_cdr(msg, traj.msgtype))
        for t, x, y in zip(T, q, v):
            msg = M["sensor_msgs/msg/JointState"](header=header(t0 + t), name=["j"], position=np.array([x]),
                                                  velocity=np.array([y]), effort=empty)
            w.write(js, int((t0 + t) * 1e9), store.serialize_cdr(msg, js.msgtype))
    s = summarize(read_bag(tmp_path / "bag"))
    arm = s["robot_time"]["arm"]
    assert arm["joint_states"] == 201
    assert arm["tracking_error"]["rms"] == pytest.approx(0.0, abs=1e-3)
    assert arm["switches"]["actual"]["velocity_change_max"] == pytest.approx(2.0, abs=1e-3)
    assert "arm (201 joint states): tracking error rms 0.0000" in format_summary(s)
