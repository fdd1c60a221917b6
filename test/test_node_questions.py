"""Progress questions are queued only while their deadline can be met, over real DDS: a
question whose answer cannot be complete before its timeout_s is refused at once with the
node's estimate in `error`; a burst of questions ends with every one answered or refused
with that reason, none timed out; /diagnostics' language entry shows the refusals and the
estimate.

The bounds come from the run itself: which questions fit is decided by the node's measured
frame interval, so the test asserts the rule (answered, or refused with an estimate larger
than the timeout), not which ones.
"""

import re
import time

import pytest

from node_harness import start_node  # noqa: F401 - pytest fixture
from ros_helpers import run_as_peer, run_peers

QUESTION = "what have you done?"
BURST = 6
BURST_TIMEOUT_S = 6.0
STALE_AFTER_S = 0.8            # > max_observation_age_s 0.5 of the stale test's node


def questions_run(namespace, *, deadline):
    from node_driver import Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: len(d.chunks) >= 5, 30.0, "five action chunks")
        impossible = d.ask(QUESTION, timeout_s=0.2)
        possible = d.ask(QUESTION, timeout_s=15.0)
        futures = [d.ask_async(f"{QUESTION} ({i})", timeout_s=BURST_TIMEOUT_S) for i in range(BURST)]
        d.wait_until(lambda: all(f.done() for f in futures), 3 * BURST_TIMEOUT_S, "every answer of the burst")
        burst = [{"success": r.success, "answer": r.answer, "error": r.error, "latency_s": r.latency_s}
                 for r in (f.result() for f in futures)]
        time.sleep(1.5)                                    # a /diagnostics message or two
        return {"impossible": impossible, "possible": possible, "burst": burst,
                "language": d.diag_values.get("language", {})}
    finally:
        d.close()


@pytest.mark.ros
def test_questions_are_queued_while_their_deadline_allows_and_refused_with_the_estimate(start_node):
    # one decode step a frame and two slots: six 24-token answers cannot all fit in 6 s at 10 Hz
    node = start_node(autostart=True, narration_every_n_frames=0, memory_every_n_frames=0, steps_per_frame=1,
                      max_requests=2, answer_max_tokens=24, max_concurrent_questions=BURST + 2)
    r = run_peers(__file__, {"driver": ["questions_run", node.namespace]}, timeout=120)["driver"]
    assert node.alive()

    impossible = r["impossible"]
    assert not impossible["success"] and impossible["error"].startswith("cannot answer within 0.2 s: about ")
    assert impossible["latency_s"] < 0.2, impossible         # refused at once, not after waiting
    assert r["possible"]["success"] and r["possible"]["answer"], r["possible"]

    answered = [a for a in r["burst"] if a["success"]]
    refused = [a for a in r["burst"] if not a["success"]]
    assert all(a["latency_s"] <= BURST_TIMEOUT_S for a in answered), answered
    for a in refused:           # a reason with the estimate, never a silent time-out
        m = re.match(r"cannot answer within 6 s: about \d+ frame\(s\) of [\d.]+ s = ([\d.]+) s", a["error"])
        assert m and float(m.group(1)) > BURST_TIMEOUT_S, a
        assert a["latency_s"] < 1.0, a
    assert answered and refused, r["burst"]

    lang = r["language"]
    assert int(lang["questions_refused_deadline"]) == 1 + len(refused), lang
    assert float(lang["question_estimate_s"]) >= 0.0 and int(lang["questions_waiting"]) == 0, lang


def stall_run(namespace, *, deadline):
    """A question that fits is queued; then every input stops. Returns its reply and the
    estimate it was queued with (from a first, impossible question's refusal)."""
    from node_driver import Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: len(d.chunks) >= 5, 30.0, "five action chunks")
        probe = d.ask(QUESTION, timeout_s=0.01)["error"]
        estimate = float(re.search(r"= ([\d.]+) s", probe).group(1))
        timeout = 2.0 * estimate + 2.0                   # fits, with room for one slow frame
        future = d.ask_async(QUESTION, timeout_s=timeout)
        time.sleep(0.2)
        for key in d.mode:                               # the robot's publishers go quiet
            d.mode[key] = "off"
        d.wait_until(future.done, timeout + 5.0, "the reply")
        r = future.result()
        return {"estimate": estimate, "timeout": timeout, "success": r.success, "error": r.error,
                "latency_s": r.latency_s}
    finally:
        d.close()


@pytest.mark.ros
def test_a_queued_question_is_refused_once_stalled_frames_cannot_finish_it_in_time(start_node):
    node = start_node(autostart=True, narration_every_n_frames=0, memory_every_n_frames=0, steps_per_frame=1,
                      answer_max_tokens=48)
    r = run_peers(__file__, {"driver": ["stall_run", node.namespace]}, timeout=120)["driver"]
    assert not r["success"], r
    assert r["error"].startswith(f"cannot answer within {r['timeout']:g} s any more: no frame is running ("), r
    assert "stale" in r["error"] or "no " in r["error"], r
    # refused once the time left fell below a full answer's, not at the deadline
    assert r["latency_s"] < r["timeout"] - 0.5 * r["estimate"], r


def stale_before_the_tick_run(namespace, *, deadline):
    """Every input stops right after a chunk; a question is asked once they are stale but
    before the node's next tick (ticks 2 s apart) could have noticed."""
    from node_driver import Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: len(d.chunks) >= 2, 60.0, "two action chunks")
        d.ask("")                                        # the service's probe, out of the way
        n = len(d.chunks)
        d.wait_until(lambda: len(d.chunks) > n, 10.0, "the next chunk")
        for key in d.mode:                               # the robot's publishers go quiet
            d.mode[key] = "off"
        time.sleep(STALE_AFTER_S)
        since_chunk_s = time.monotonic() - d.chunks[-1][0]
        return {**d.ask(QUESTION, timeout_s=12.0, wait=20.0), "since_chunk_s": since_chunk_s}
    finally:
        d.close()


@pytest.mark.ros
def test_a_question_asked_once_inputs_are_stale_is_refused_at_once_naming_them(start_node):
    # the inputs' staleness is known as soon as it happens, not at the next tick: a question
    # is not queued behind frames that will not run (a CI run saw one refused for a full board
    # instead, the board holding the questions asked before the fault)
    node = start_node(autostart=True, narration_every_n_frames=0, memory_every_n_frames=0,
                      control_rate_hz=0.5, max_observation_age_s=0.5, answer_max_tokens=8)
    r = run_peers(__file__, {"driver": ["stale_before_the_tick_run", node.namespace]}, timeout=120)["driver"]
    assert node.alive()
    # asked before the next tick, 2 s after the one that made the last chunk (a later tick
    # would refuse it the same way: the test would then not tell the fix apart)
    assert r["since_chunk_s"] < 1.5, r
    assert not r["success"] and r["error"].startswith("cannot answer within 12 s: "), r
    assert "stale" in r["error"], r
    assert r["latency_s"] < 1.0, r


def lockstep_run(namespace, *, deadline):
    """Observations slower than the node's ticks (a lock-step sim: most ticks find no new one):
    questions asked at any moment between them."""
    from node_driver import Driver

    d = Driver(namespace, image_hz=2.0, joint_hz=2.0)
    try:
        d.wait_until(lambda: len(d.chunks) >= 2, 30.0, "two action chunks")
        replies = []
        for i in range(4):
            time.sleep(0.13 * i)                         # at different points between observations
            r = d.ask(f"{QUESTION} ({i})", timeout_s=30.0, wait=40.0)
            replies.append({"success": r["success"], "error": r["error"], "answer": r["answer"]})
        return replies
    finally:
        d.close()


@pytest.mark.ros
def test_waiting_for_the_next_observation_is_not_a_stall(start_node):
    # new_observations_only: a tick on the same observation makes no chunk, as with a lock-step
    # sim; a question asked then waits for the next frame instead of being refused as stalled
    node = start_node(autostart=True, narration_every_n_frames=0, memory_every_n_frames=0,
                      new_observations_only=True, max_observation_age_s=2.0, answer_max_tokens=8)
    replies = run_peers(__file__, {"driver": ["lockstep_run", node.namespace]}, timeout=150)["driver"]
    assert node.alive()
    assert all(r["success"] and r["answer"] for r in replies), replies


if __name__ == "__main__":
    run_as_peer({"questions_run": questions_run, "stall_run": stall_run, "lockstep_run": lockstep_run,
                 "stale_before_the_tick_run": stale_before_the_tick_run})
