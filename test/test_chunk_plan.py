"""Robot time, ROS-free: how a chunk is stamped and spaced, the two rates, the rate check."""
import json

import numpy as np
import pytest

from oxygen_ros.node.chunk_plan import PublishedChunk, finite_difference_velocities, plan_chunk
from oxygen_ros.node.rate_check import RateCheck


def chunk(h=10, j=2):
    return np.stack([np.arange(h) * 0.1 + k for k in range(j)], axis=1)


def test_the_stamp_is_the_observation_and_points_are_spaced_at_the_action_rate():
    """Stamped at action 0's time (the observation's), point i at i / action rate; the
    replanning rate appears nowhere."""
    p = plan_chunk(chunk(), obs_stamp_s=100.0, action_dt=0.02, now_s=99.0)
    assert p.stamp_s == 100.0 and p.dropped == 0
    assert np.allclose(p.times, np.arange(10) * 0.02)
    assert np.all(np.diff(p.times) > 0)                    # strictly increasing time_from_start
    assert np.array_equal(p.positions, chunk())
    assert p.velocities is None


def test_points_already_past_at_publication_are_dropped_and_counted():
    """Published 35 ms after a 100 Hz chunk's observation: points 0..3 (0..30 ms) are past
    and point 4 (40 ms) is due within one 100 Hz controller update: both dropped; the rest
    keep their own times from the same stamp."""
    p = plan_chunk(chunk(), obs_stamp_s=100.0, action_dt=0.01, now_s=100.035)
    assert p.dropped == 5 and p.stamp_s == 100.0
    assert np.allclose(p.times, np.arange(5, 10) * 0.01)
    assert np.array_equal(p.positions, chunk()[5:])
    late = plan_chunk(chunk(), obs_stamp_s=100.0, action_dt=0.01, now_s=100.2)
    assert late.empty and late.dropped == 10                # the whole chunk ended: nothing to send
    # a point due sooner than one 100 Hz controller update is dropped too (a velocity spike)
    close = plan_chunk(chunk(), obs_stamp_s=100.0, action_dt=0.01, now_s=100.0555)
    assert close.dropped == 7 and close.times[0] == pytest.approx(0.07)


def test_velocities_are_finite_differences_with_a_zero_last_one():
    """Central differences inside, forward at the first point, zero at the end (what the
    JTC requires unless allow_nonzero_velocity_at_trajectory_end)."""
    pos = np.array([[0.0], [1.0], [4.0], [9.0]])
    v = finite_difference_velocities(pos, 0.5)
    assert np.allclose(v[:, 0], [2.0, 4.0, 8.0, 0.0])      # (1-0)/.5, (4-0)/1, (9-1)/1, 0
    p = plan_chunk(pos, 0.0, 0.5, now_s=0.6, with_velocities=True)   # points at 0, .5 past
    assert p.dropped == 2 and np.allclose(p.velocities[:, 0], [8.0, 0.0])   # cut after differencing


def test_a_non_positive_action_period_is_an_error():
    with pytest.raises(ValueError, match="positive"):
        plan_chunk(chunk(), 0.0, 0.0, 0.0)


def test_the_remainder_of_a_published_chunk_on_a_new_time_base():
    """Rows at start + i dt, linearly interpolated, only while inside the chunk."""
    pos = np.arange(10, dtype=float)[:, None]               # position = step index
    c = PublishedChunk(stamp_s=5.0, dt=0.1, positions=pos)
    rows = c.remainder(5.25, 10)                             # 2.5 steps in
    assert np.allclose(rows[:, 0], np.arange(2.5, 9.01, 1.0))  # 2.5 .. 8.5: 7 rows
    assert len(c.remainder(6.0, 10)) == 0                    # after its last point (5.9): nothing


def test_the_rate_check_skips_warm_up_and_names_the_rate_it_holds():
    """A cold first frame does not decide; the median of the next frames does."""
    check = RateCheck(period_s=0.1, warmup=2, frames=3)
    for f in (2.0, 0.5, 0.05, 0.06):
        check.observe(f)
    assert not check.measured and check.holds is None
    check.observe(0.07)
    assert check.holds and check.frame_s == pytest.approx(0.06)
    for f in (0.25, 0.25, 0.25):
        check.observe(f)
    assert check.holds is False and check.holdable_hz == pytest.approx(4.0)


def test_the_checkpoint_says_its_action_rate(tmp_path):
    """config.json fps, LeRobot's train_config.json env.fps, meta/info.json fps, in that order."""
    from oxygen_ros.engine.policy_io.checkpoint import action_rate_hz

    assert action_rate_hz(tmp_path) == (None, "")
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(json.dumps({"fps": 15}))
    assert action_rate_hz(tmp_path) == (15.0, "meta/info.json: fps")
    (tmp_path / "train_config.json").write_text(json.dumps({"env": {"fps": 30}}))
    assert action_rate_hz(tmp_path) == (30.0, "train_config.json: env.fps")
    (tmp_path / "config.json").write_text(json.dumps({"fps": 50, "chunk_size": 50}))
    assert action_rate_hz(tmp_path) == (50.0, "config.json: fps")
