"""oxygen_node with several action experts on one prefix (qwen3vl-multi-tiny: XR-0's head
for the arm, a PI_v3 head on the prefix hidden states for the hands, a second XR-0-style
head for the base) over real DDS: each expert's trajectory on its own topic with its own
joints, horizon and action rate, all stamped at the same observation; FrameTiming names
every further expert with its phase time; language keeps decoding; with RTC every expert
has its own planner."""
import time

import pytest

from node_harness import node_processes, start_node  # noqa: F401 - pytest fixture
from ros_helpers import run_as_peer, run_peers

HANDS = ["l_thumb", "l_index", "r_thumb", "r_index"]
BASE = ["base_x", "base_yaw"]


def multi_run(namespace, *, deadline):
    from node_driver import Driver

    d = Driver(namespace, trajectory_topics=("joint_trajectory/hands", "base/cmd_trajectory"))
    try:
        d.wait_until(lambda: len(d.chunks) >= 8 and all(len(c) >= 8 for c in d.expert_chunks.values()),
                     40.0, "8 chunks on every expert's topic")
        r = d.ask("what have you done?", timeout_s=10.0)

        def summary(chunks):
            msgs = [m for _, m in chunks]
            return {"names": sorted({tuple(m.joint_names) for m in msgs}),
                    "points": sorted({len(m.points) for m in msgs}),
                    "spacing": sorted({round((m.points[1].time_from_start.nanosec - m.points[0].time_from_start.nanosec
                                              + 1e9 * (m.points[1].time_from_start.sec - m.points[0].time_from_start.sec))
                                             / 1e9, 6) for m in msgs if len(m.points) > 1}),
                    "stamps": [(m.header.stamp.sec, m.header.stamp.nanosec) for m in msgs]}
        timings = [m for _, m in list(d.timings)]
        return {"arm": summary(list(d.chunks)),
                **{t: summary(list(c)) for t, c in d.expert_chunks.items()},
                "expert_names": sorted({tuple(m.expert_names) for m in timings}),
                "expert_ms": [list(m.expert_action_ms) for m in timings[-5:]],
                "answer": r}
    finally:
        d.close()


@pytest.mark.ros
def test_every_expert_publishes_its_own_trajectory(start_node):
    node = start_node(autostart=True, model="qwen3vl-multi-tiny", narration_every_n_frames=5,
                      expert_joint_names=[",".join(HANDS), ",".join(BASE)],
                      expert_joint_lower_limits=[0.0] * 4 + [-1.0, -3.0],
                      expert_joint_upper_limits=[1.0] * 4 + [1.0, 3.0],
                      expert_trajectory_topics=["", "base/cmd_trajectory"],
                      expert_action_rates_hz=[25.0, 0.0])
    r = run_peers(__file__, {"driver": ["multi_run", node.namespace]}, timeout=90)["driver"]
    hands, base = r["joint_trajectory/hands"], r["base/cmd_trajectory"]
    assert hands["names"] == [HANDS] and base["names"] == [BASE]          # (JSON: lists)
    assert r["arm"]["names"] and r["arm"]["names"][0] != HANDS
    # horizons 6 and 5 (the profile's), minus the points already past at publication
    assert max(hands["points"]) <= 6 and max(base["points"]) <= 5
    assert hands["spacing"] == [0.04]                          # its own 25 Hz
    assert base["spacing"] == [0.08]                           # the first expert's (tiny.yaml: 12.5 Hz)
    # one observation per frame: the three trajectories of a frame share its stamp
    stamps = [{tuple(s) for s in x["stamps"]} for x in (hands, base, r["arm"])]
    assert stamps[0] & stamps[1] & stamps[2]
    assert r["expert_names"] == [["hands", "base"]]
    assert all(len(ms) == 2 and min(ms) > 0 for ms in r["expert_ms"]), r["expert_ms"]
    assert r["answer"]["success"], r["answer"]
    assert node.alive()


def rtc_multi_run(namespace, *, deadline):
    """Chunks of every expert with RTC guided: positions, and /diagnostics' robot time."""
    from node_driver import Driver

    d = Driver(namespace, trajectory_topics=("joint_trajectory/hands", "joint_trajectory/base"))
    try:
        d.wait_until(lambda: all(len(c) >= 10 for c in d.expert_chunks.values()), 40.0,
                     "10 chunks on every further expert's topic")
        seen = time.monotonic()
        delays = [m.rtc_delay_steps for _, m in list(d.timings)]
        return {"hands": [list(p.positions) for _, m in list(d.expert_chunks["joint_trajectory/hands"])
                          for p in m.points],
                "delays": delays, "robot_time": d.diag_values_after(seen, "robot time")}
    finally:
        d.close()


@pytest.mark.ros
def test_every_expert_has_its_own_rtc_planner_and_statistics(start_node, tmp_path):
    """rtc_mode guided on a multi-expert model: each further expert (the PI_v3 hidden-state
    reader too) is guided by its own planner after its own first chunk (/diagnostics per
    expert); the hands' own quantile statistics, not their joint limits, set where their
    positions land (q01 0.4 .. q99 0.5 inside limits 0 .. 1)."""
    import json

    stats = tmp_path / "hands_norm_stats.json"
    stats.write_text(json.dumps({"norm_stats": {"actions": {"q01": [0.4] * 6, "q99": [0.5] * 6}}}))
    node = start_node(autostart=True, model="qwen3vl-multi-tiny", rtc_mode="guided",
                      expert_joint_names=[",".join(HANDS), ",".join(BASE)],
                      expert_joint_lower_limits=[0.0] * 4 + [-1.0, -3.0],
                      expert_joint_upper_limits=[1.0] * 4 + [1.0, 3.0],
                      expert_action_statistics=[str(stats)])
    r = run_peers(__file__, {"driver": ["rtc_multi_run", node.namespace]}, timeout=90)["driver"]
    rt = r["robot_time"]
    # only the first chunk is plain, apart from input gaps (a loaded machine can delay inputs
    # until the previous chunk has ended: nothing to continue); counted, not timed
    for name in ("hands", "base"):
        assert int(rt[f"rtc_plain_chunks:{name}"]) - int(rt[f"rtc_input_gaps:{name}"]) == 1, rt
        guided = int(rt[f"rtc_guided_chunks:{name}"])
        assert guided >= 1 and guided + int(rt[f"rtc_plain_chunks:{name}"]) >= 10, rt
    delays = r["delays"]
    assert delays[0] == 0 and sum(d == 0 for d in delays[1:]) <= int(rt["rtc_input_gaps"]), (delays, rt)
    hands = [x for row in r["hands"] for x in row]
    # a random head's model actions lie within a few units of 0 -> (y + 1) / 2 * 0.1 + 0.4 stays
    # well inside 0 .. 1; the limits convention maps y = +-1 onto 0 and 1 and would clip there
    assert 0.1 < min(hands) and max(hands) < 0.9 and max(hands) - min(hands) > 1e-3, (min(hands), max(hands))
    assert node.alive()


@pytest.mark.ros
def test_expert_joints_must_fit_the_model(start_node):
    """A multi-expert model without its experts' joints fails configure, naming the parameter."""
    node = start_node(autostart=True, model="qwen3vl-multi-tiny")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "expert_joint_names" not in node.log():
        time.sleep(0.5)
    assert "expert_joint_names needs one comma-separated entry for each" in node.log()
    assert node.alive()


if __name__ == "__main__":
    run_as_peer({"multi_run": multi_run, "rtc_multi_run": rtc_multi_run})
