"""The simulated robot's trajectory controller: what a Jazzy joint_trajectory_controller
accepts, what it commands when, and the jumps at chunk boundaries (no ROS)."""
import numpy as np
import pytest

from oxygen_ros.tools.trajectory_executor import (
    BoundaryJump, TrajectoryExecutor, TrajectoryRejected, jump_stats, replay)

AB = ["a", "b"]


def executor(**options):
    return TrajectoryExecutor(AB, [0.0, 0.0], **options)


def rejection(ex, *args, now=0.0, **kwargs) -> str:
    with pytest.raises(TrajectoryRejected) as e:
        ex.receive(*args, now=now, **kwargs)
    return str(e.value)


# ------------------------------------------------------------------ what is rejected

def test_each_rule_of_validate_trajectory_msg_rejects_with_the_controllers_reason():
    ex = executor()
    assert rejection(ex, ["a"], 0, [1.0], [[1.0]]) == \
        "Joints on incoming trajectory don't match the controller joints."
    assert rejection(executor(allow_partial_joints_goal=True), [], 0, [1.0], [[]]) == \
        "Empty joint names on incoming trajectory."
    assert rejection(ex, ["a", "x"], 0, [1.0], [[1.0, 2.0]]) == \
        "Incoming joint x doesn't match the controller's joints."
    assert rejection(ex, AB, 0, [], []) == "Empty trajectory received."
    assert rejection(ex, AB, 0, [0.1, 0.1], [[0, 0], [1, 1]]).startswith(
        "Time between points 0 and 1 is not strictly increasing")
    assert rejection(ex, AB, 0, [0.1, 0.2], [[0, 0], [1]]) == \
        "Mismatch between joint_names size (2) and positions (1) at point #1."
    assert rejection(ex, AB, 0, [0.1], [[0, 0]], [[0, 0, 0]]) == \
        "Mismatch between joint_names size (2) and velocities (3) at point #0."
    assert rejection(ex, AB, 0, [0.1], [[0, 0]], [[0, 0.5]]).startswith(
        "Velocity of last trajectory point of joint b is not zero")
    assert rejection(ex, AB, 10.0, [0.1, 0.2], [[0, 0], [1, 1]], now=10.5).startswith(
        "Received trajectory with non-zero start time (10.000000) that ends in the past (10.200000)")


def test_what_the_options_and_stamp_zero_let_through():
    executor(allow_nonzero_velocity_at_trajectory_end=True).receive(AB, 0, [0.1], [[0, 0]], [[0, 0.5]], now=0)
    executor(allow_partial_joints_goal=True).receive(["b"], 0, [0.1], [[1.0]], now=0)
    executor().receive(AB, 0, [0.1, 0.2], [[0, 0], [1, 1]], now=10.5)      # stamp 0: starts now


def test_a_rejected_trajectory_keeps_the_current_one():
    ex = executor()
    ex.receive(AB, 0, [1.0], [[1.0, 2.0]], now=0.0)
    rejection(ex, AB, 0, [], [], now=0.5)
    assert np.allclose(ex.sample(5.0)[0], [1.0, 2.0]) and ex.jumps == []


# ------------------------------------------------------------------ what is commanded when

def test_a_new_trajectory_replaces_the_old_one_outright():
    ex = executor()
    ex.receive(AB, 0, [1.0, 2.0], [[1, 1], [2, 2]], now=0.0)
    ex.receive(["b", "a"], 0, [1.0], [[3.0, -1.0]], now=0.5)                # by name, any order
    assert np.allclose(ex.sample(1.5)[0], [-1.0, 3.0])                      # the old points are gone
    assert np.allclose(ex.sample(2.5)[0], [-1.0, 3.0])


def test_stamp_zero_starts_at_receipt_from_the_initial_positions():
    ex = executor()
    ex.receive(AB, 0, [1.0], [[2.0, 4.0]], now=5.0)
    assert np.allclose(ex.sample(5.0)[0], [0, 0])
    assert np.allclose(ex.sample(5.5)[0], [1.0, 2.0]) and np.allclose(ex.sample(5.5)[1], [2.0, 4.0])
    assert np.allclose(ex.sample(6.0)[0], [2.0, 4.0])


def test_a_stamp_in_the_past_skips_the_points_already_past():
    """Points at 10.1 .. 10.4, received at 10.25: the command is on the 10.2 -> 10.3 segment."""
    ex = executor()
    pts = [[k, -k] for k in (1.0, 2.0, 3.0, 4.0)]
    ex.receive(AB, 10.0, [0.1, 0.2, 0.3, 0.4], pts, now=10.25)
    q, v = ex.sample(10.25)
    assert np.allclose(q, [2.5, -2.5]) and np.allclose(v, [10.0, -10.0])


def test_positions_only_interpolate_linearly_with_a_constant_velocity_per_segment():
    ex = executor()
    ex.receive(AB, 0, [1.0, 2.0], [[1.0, 0.0], [3.0, -1.0]], now=0.0)
    q, v = ex.sample(1.5)
    assert np.allclose(q, [2.0, -0.5]) and np.allclose(v, [2.0, -1.0])
    assert np.allclose(ex.sample(1.9)[1], [2.0, -1.0])


def test_with_velocities_the_cubic_matches_both_ends_and_is_smooth():
    ex = executor()
    times, pos, vel = [1.0, 2.0, 3.0], [[1.0, 0.0], [2.0, 1.0], [2.5, 0.0]], [[1.0, 0.5], [0.8, 0.0], [0.0, 0.0]]
    ex.receive(AB, 0, times, pos, vel, now=0.0)
    for t, p, v in zip(times[:-1], pos, vel):
        q, qd = ex.sample(t)
        assert np.allclose(q, p) and np.allclose(qd, v)
        assert np.allclose(ex.sample(t - 1e-9)[0], p, atol=1e-6)              # continuous from the left
        assert np.allclose(ex.sample(t - 1e-9)[1], v, atol=1e-6)
    ts = np.linspace(0.0, 3.0, 3001)
    q = np.array([ex.sample(t)[0] for t in ts])
    qd = np.array([ex.sample(t)[1] for t in ts])
    assert np.allclose(np.gradient(q, ts, axis=0)[1:-1], qd[1:-1], atol=1e-2)   # velocity is dq/dt
    assert np.abs(np.diff(qd, axis=0)).max() < 1e-2                            # and has no steps


def test_after_the_last_point_it_holds_with_zero_velocity():
    ex = executor()
    ex.receive(AB, 0, [1.0], [[1.0, -1.0]], [[0.0, 0.0]], now=0.0)
    q, v = ex.sample(100.0)
    assert np.allclose(q, [1.0, -1.0]) and np.allclose(v, 0.0)


def test_joints_a_partial_goal_leaves_out_hold_their_commanded_position():
    ex = executor(allow_partial_joints_goal=True)
    ex.receive(AB, 0, [1.0], [[1.0, 2.0]], now=0.0)
    ex.receive(["b"], 0, [1.0], [[0.0]], now=0.5)                           # a is at 0.5 then
    assert np.allclose(ex.sample(3.0)[0], [0.5, 0.0])


def test_the_segment_before_the_first_point_starts_from_the_commanded_state():
    ex = executor()
    ex.receive(AB, 0, [1.0], [[1.0, 1.0]], now=0.0)                         # at 0.5: [0.5, 0.5]
    ex.receive(AB, 0, [1.0], [[2.0, 2.0]], now=0.5)
    assert np.allclose(ex.sample(0.5)[0], [0.5, 0.5])                       # no position step
    assert np.allclose(ex.sample(1.0)[0], [1.25, 1.25])                     # 0.5 + 1.5 * 0.5 / 1


def test_with_velocities_the_switch_keeps_the_commanded_velocity():
    ex = executor()
    ex.receive(AB, 0, [1.0, 2.0], [[1.0, 1.0], [2.0, 2.0]], [[1.0, 1.0], [0.0, 0.0]], now=0.0)
    q0, v0 = ex.sample(0.5)
    ex.receive(AB, 0, [1.0], [[3.0, 0.0]], [[0.0, 0.0]], now=0.5)
    q1, v1 = ex.sample(0.5)
    assert np.allclose(q1, q0) and np.allclose(v1, v0)
    assert ex.jumps[0].velocity_jump == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------ boundary jumps

def test_boundary_jumps_by_hand():
    """Old: from 0 at t=0 to a=1, b=2 at t=1 (velocities a=1, b=2), then held.
    New at t=0.5 (stamp 0): a=2, b=0.5 at t=1.5. Commanded at 0.5: a=0.5, b=1.
    position: old at 1.5 is held (1, 2): |2 - 1| = 1, |0.5 - 2| = 1.5  -> 1.5
    velocity: new just after 0.5 is (2 - 0.5)/1 = 1.5 and (0.5 - 1)/1 = -0.5;
              |1.5 - 1| = 0.5, |-0.5 - 2| = 2.5                           -> 2.5"""
    ex = executor()
    ex.receive(AB, 0, [1.0], [[1.0, 2.0]], now=0.0)
    assert ex.jumps == []                                                  # nothing replaced yet
    ex.receive(AB, 0, [1.0], [[2.0, 0.5]], now=0.5)
    assert ex.jumps == [BoundaryJump(0.5, pytest.approx(1.5), pytest.approx(2.5))]


def test_jump_stats():
    assert jump_stats([]) == {"count": 0, "position_max": 0.0, "position_p95": 0.0,
                              "velocity_max": 0.0, "velocity_p95": 0.0}
    jumps = [BoundaryJump(float(i), 0.01 * i, 0.1 * i) for i in range(1, 21)]
    s = jump_stats(jumps)
    assert s["count"] == 20 and s["position_max"] == pytest.approx(0.2) and s["velocity_max"] == pytest.approx(2.0)
    assert s["position_p95"] == pytest.approx(np.percentile([0.01 * i for i in range(1, 21)], 95))
    assert s["velocity_p95"] == pytest.approx(np.percentile([0.1 * i for i in range(1, 21)], 95))


def test_replay_of_a_short_sequence():
    """The boundary of test_boundary_jumps_by_hand, then a chunk that ended before it arrived."""
    messages = [(0.0, AB, 0.0, [1.0], [[1.0, 2.0]], None),
                (0.5, AB, 0.0, [1.0], [[2.0, 0.5]], None),
                (2.0, AB, 1.0, [0.2, 0.4], [[0.0, 0.0], [1.0, 1.0]], None)]
    jumps, rejections = replay(messages, AB, [0.0, 0.0])
    assert [(j.time, j.position_jump, j.velocity_jump) for j in jumps] == \
        [(0.5, pytest.approx(1.5), pytest.approx(2.5))]
    assert len(rejections) == 1 and "ends in the past" in rejections[0]
