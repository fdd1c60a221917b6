"""The node's robot-time edges, ROS-free: each gives a log line and a count, none raises."""
import numpy as np
import pytest

from oxygen_ros.engine.policy_io.limits import LimitsIO
from oxygen_ros.engine.rtc import DelayEstimator, RTCConfig
from oxygen_ros.node.chunk_plan import plan_chunk
from oxygen_ros.node.robot_time import RobotTime, action_rate
from oxygen_ros.node.rtc_planner import RTCPlanner

LIMITS = LimitsIO.from_limits([-2.0, -1.0], [2.0, 1.0], [-2.0, -1.0], [2.0, 1.0], horizon=10)


def params(**kw):
    p = {"action_rate_hz": 20.0, "rtc_mode": "guided", "rtc_schedule": "exp", "rtc_beta": 10.0,
         "rtc_execution_horizon": 10, "replanning": "rate", "chunk_points": 0}
    p.update(kw)
    return p


def robot_time(period_s=0.1, **kw):
    return RobotTime.from_params(params(**kw), LIMITS, horizon=10, period_s=period_s)


class _Checkpoint:
    action_rate_hz, action_rate_source = 15.0, "meta/info.json: fps"


def test_the_action_rate_is_the_parameter_else_the_checkpoints_never_the_replanning_rate():
    assert action_rate(params(), LIMITS) == (20.0, "parameter action_rate_hz")
    assert action_rate(params(action_rate_hz=0.0), _Checkpoint()) == (15.0, "checkpoint meta/info.json: fps")
    with pytest.raises(ValueError, match="set action_rate_hz .* not the replanning rate"):
        action_rate(params(action_rate_hz=0.0), LIMITS)
    # two rates, independent: points 1/20 s apart whatever the replanning rate
    for period in (0.05, 0.1, 0.4):
        assert robot_time(period_s=period).action_dt == pytest.approx(0.05)


def test_a_chunk_shorter_than_the_replanning_period_is_warned_at_configure():
    """10 points at 20 Hz span 0.5 s: fine at 10 Hz, the arm would stop at 1 Hz."""
    assert robot_time(period_s=0.1).configure_warnings == []
    [warning] = robot_time(period_s=1.0).configure_warnings
    assert "shorter than the 1000 ms replanning period" in warning and "arm would stop" in warning
    assert "arm would stop" in robot_time(period_s=0.2, chunk_points=3).configure_warnings[0]
    assert robot_time(period_s=1.0, replanning="asap").configure_warnings == []
    with pytest.raises(ValueError, match="replanning"):
        robot_time(replanning="sometimes")


def test_a_clock_jump_between_tick_and_publication_restamps_on_the_new_time_line():
    rt = robot_time()
    assert rt.observation_time(100.0, 100.02, 100.1, elapsed_mono_s=0.08) == (100.0, "")
    moved, line = rt.observation_time(100.0, 100.02, 105.1, elapsed_mono_s=0.08)   # +5 s jump
    assert moved == pytest.approx(105.0) and "ROS clock jumped by +5.000 s" in line
    assert rt.clock_jumps == 1 and "clock" in rt.diagnostics()["problems"][0]


def test_a_stamp_off_the_nodes_clock_counts_as_taken_at_the_tick():
    rt = robot_time()
    obs, line = rt.observation_time(1.7e9, 1000.0, 1000.05, elapsed_mono_s=0.05)   # wall vs sim time
    assert obs == 1000.0 and "another clock" in line
    assert rt.stamps_off_clock == 1


def test_a_chunk_that_ended_before_publication_is_not_sent_and_is_reported():
    rt = robot_time()
    planned = plan_chunk(np.zeros((10, 2)), 10.0, 0.05, now_s=11.0)
    line = rt.chunk_sent(planned, np.zeros((10, 2)), latency_s=1.0)
    assert "chunk not published" in line and "latency 1000 ms > chunk span 500 ms" in line
    assert rt.chunks_expired == 1 and rt.points_dropped == 10
    assert rt.rtc.previous is None                  # nothing was executed from it


def test_the_rate_check_warns_once_with_the_rate_this_machine_holds():
    rt = robot_time(period_s=0.1)
    lines = [rt.frame_done(f) for f in (1.0, 0.5, 0.2, 0.2, 0.25, 0.2, 0.2, 0.2)]
    warned = [line for line in lines if line]
    assert len(warned) == 1 and "control_rate_hz 10 cannot be held" in warned[0] and "5.00 Hz" in warned[0]
    assert rt.diagnostics()["values"]["rate_holdable_hz"] == pytest.approx(5.0)
    assert robot_time(replanning="asap").frame_done(5.0) == ""


def test_rtc_planner_first_chunk_gap_delay_and_clamp():
    """No previous chunk: plain, with the reason. Then the remainder on the new time base,
    in model space; the delay from measured latencies; clamped to what remains; a
    previous chunk that ended before the observation is an input gap: plain again."""
    planner = RTCPlanner(RTCConfig(mode="guided"), LIMITS, action_rate_hz=10.0, horizon=10)
    guide, note = planner.guide(5.0, [0.0, 0.0])
    assert guide is None and "first chunk after activation" in note and planner.plain_chunks == 1

    positions = np.stack([np.linspace(0.0, 1.8, 10), np.zeros(10)], axis=1)   # 0.2 rad a step
    planner.published(5.0, positions, latency_s=0.25)
    guide, note = planner.guide(5.3, [0.0, 0.0])            # 3 steps on
    assert note == "" and guide.delay == 3                  # ceil(0.25 s x 10 Hz)
    assert guide.prefix.shape == (7, 2)                     # rows 3..9 of the previous chunk
    # model space is the limits' [-1, 1]: 0.6 rad of [-2, 2] -> 0.3
    assert np.allclose(guide.prefix[:, 0].numpy(), np.linspace(0.6, 1.8, 7) / 2.0)

    planner.estimator = DelayEstimator(warmup=0)
    planner.estimator.observe(0.9)                          # 9 steps wanted
    guide, note = planner.guide(5.6, [0.0, 0.0])            # only 4 rows remain
    assert guide.delay == 4 and "clamped to 4" in note and planner.clamped == 1

    guide, note = planner.guide(7.0, [0.0, 0.0])            # the chunk ended at 5.9
    assert guide is None and "input gap" in note and planner.plain_chunks == 2
    assert planner.input_gaps == 1 and planner.guided_chunks == 2 and planner.last_delay == 0
    planner.reset()
    assert planner.guide(5.3, [0.0, 0.0])[0] is None        # activation forgets the chunk


def test_an_arm_that_runs_out_of_chunks_is_warned_once_with_the_gap():
    """10 points at 20 Hz: the last is due 0.45 s after the observation; at a 0.4 s period
    and 0.2 s latency the next chunk lands at 0.6 s: the arm waits 150 ms."""
    rt = robot_time(period_s=0.4)
    for _ in range(7):
        rt.chunk_sent(plan_chunk(np.zeros((10, 2)), 0.0, 0.05, now_s=0.2), np.zeros((10, 2)), latency_s=0.2)
    lines = [rt.frame_done(0.3) for _ in range(8)]
    warned = [line for line in lines if line]
    assert len(warned) == 1 and "runs out of each chunk 150 ms before" in warned[0], lines
    assert "the arm waits 150 ms between chunks" in rt.diagnostics()["problems"]
    assert robot_time(period_s=0.1).starved_s() is None          # not measured yet
