"""oxygen_node with the tiny models (pi0.5-style and Qwen3-VL) at 10 Hz over real DDS, node and driver in separate
processes: action chunks keep the rate, text streams are exact, and a progress
question is answered while the chunks keep flowing.

One 10 s run (module fixture) feeds several tests. Run by pytest; this file is also
the driver peer program.
"""

import time

import pytest

from node_harness import node_processes, start_node  # noqa: F401 - pytest fixture
from ros_helpers import run_as_peer, run_peers

WINDOW_S = 10.0
QUESTION = "what have you done?"
ACTION_DT = 0.08          # config/tiny.yaml action_rate_hz: 12.5


# ----------------------------------------------------------------- driver peer

def ten_hz_run(namespace, *, deadline):
    from node_driver import JOINTS, PERIOD_S, Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: d.chunks, 30.0, "the first action chunk (autostart)")
        time.sleep(1.0)                                     # past warm-up frames
        t0 = time.monotonic()
        time.sleep(WINDOW_S / 2)
        ask_start = time.monotonic()
        future = d.ask_async(QUESTION, timeout_s=8.0)
        d.wait_until(future.done, 10.0, "the answer")
        ask_end = time.monotonic()
        r = future.result()
        answer = {"success": r.success, "answer": r.answer, "error": r.error, "latency_s": r.latency_s}
        time.sleep(max(0.0, t0 + WINDOW_S - time.monotonic()))
        t1 = t0 + WINDOW_S
        time.sleep(0.5)                                     # let the last text land

        chunks = [(t, m) for t, m in list(d.chunks) if t0 <= t < t1]
        times = [t for t, _ in chunks]
        gaps = [b - a for a, b in zip(times, times[1:])]
        # gaps between the chunks' header stamps (the node's ticks), free of the driver's
        # own scheduling jitter; receive-time gaps are reported alongside
        during = [(t, m.header.stamp.sec + m.header.stamp.nanosec * 1e-9) for t, m in list(d.chunks)
                  if ask_start - 0.2 <= t <= ask_end + 0.2]
        q_gaps = [b[1] - a[1] for a, b in zip(during, during[1:])]
        q_recv_gaps = [b[0] - a[0] for a, b in zip(during, during[1:])]
        bad_names = sum(list(m.joint_names) != JOINTS for _, m in chunks)
        tfs = [[p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in m.points]
               for _, m in chunks]
        not_increasing = sum(any(b <= a for a, b in zip(ts, ts[1:])) for ts in tfs)
        spacing = sorted({round(b - a, 6) for ts in tfs for a, b in zip(ts, ts[1:])})
        positions_ok = all(len(p.positions) == len(JOINTS) for _, m in chunks for p in m.points)
        stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in chunks]
        timing = [m for t, m in list(d.timings) if t0 <= t < t1]
        # each frame's trajectory and FrameTiming carry the same observation stamp
        arrived = {(m.header.stamp.sec, m.header.stamp.nanosec): t for t, m in list(d.chunks)}
        frames = [(arrived.get((m.observation_stamp.sec, m.observation_stamp.nanosec)), t, m)
                  for t, m in list(d.timings) if t0 <= t < t1]
        decoding = [(tc, tt, m) for tc, tt, m in frames if tc is not None and m.decode_steps > 0]
        return {
            "chunks": len(chunks), "max_gap_s": max(gaps, default=None),
            "question_window_s": ask_end - ask_start, "question_max_gap_s": max(q_gaps, default=None),
            "question_max_recv_gap_s": max(q_recv_gaps, default=None),
            "question_chunks": len(during),
            "bad_names": bad_names, "not_increasing": not_increasing, "spacing": spacing,
            "points": sorted({len(m.points) for _, m in chunks}), "positions_ok": positions_ok,
            "stamps_increasing": all(b >= a for a, b in zip(stamps, stamps[1:])),
            "first_tfs": tfs[0] if tfs else [],
            "timings": len(timing), "period_ms": sorted({round(m.period_ms, 3) for m in timing}),
            "timing_total_ms_max": max((m.total_ms for m in timing), default=None),
            "answer": answer, "text": d.text_requests(), "period_s": PERIOD_S,
            "paired_frames": sum(tc is not None for tc, _, _ in frames), "frames": len(frames),
            "decoding_frames": len(decoding),
            "chunk_after_decode": [(m.chunk_ms, m.admit_ms, m.decode_ms, m.total_ms) for _, _, m in decoding
                                   if not m.chunk_ms + m.admit_ms + m.decode_ms <= m.total_ms + 0.5],
            "chunk_latency_ms": [m.chunk_latency_ms for _, _, m in frames],
            # paired by observation stamp; on a loaded machine two frames can share one
            # observation (its inputs came no faster), and such a stamp pairs nothing reliably
            "dropped_vs_points": sorted({(m.points_dropped, len(c.points)) for _, c in chunks
                                         for m in timing if m.observation_stamp == c.header.stamp
                                         and sum(x.observation_stamp == c.header.stamp for x in timing) == 1
                                         and sum(y.header.stamp == c.header.stamp for _, y in chunks) == 1}),
        }
    finally:
        d.close()


def slow_frames_run(namespace, *, deadline):
    """GetState, ask_progress and /diagnostics latencies while > 0.5 s frames compute."""
    from node_driver import Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: len(d.chunks) >= 2, 30.0, "two action chunks")
        t0 = time.monotonic()
        state_s, ask_s = [], []
        while time.monotonic() - t0 < 8.0:           # several 1-3 s frames
            t = time.monotonic()
            d.state()
            state_s.append(time.monotonic() - t)
            t = time.monotonic()
            d.ask("")                                    # answered at once: empty question
            ask_s.append(time.monotonic() - t)
            time.sleep(0.1)
        diag_t = [t for t, s in list(d.diags) if t >= t0]
        chunk_t = d.chunk_times()       # every chunk of the run: frames of seconds leave few in 8 s
        return {"frame_ms": [m.total_ms for t, m in list(d.timings) if t >= t0],
                "state_max_s": max(state_s), "ask_max_s": max(ask_s), "calls": len(state_s),
                "diag_gaps": [b - a for a, b in zip(diag_t, diag_t[1:])],
                "chunk_gaps": [b - a for a, b in zip(chunk_t, chunk_t[1:])]}
    finally:
        d.close()


def rtc_run(namespace, *, deadline):
    """Chunks with RTC guided: the delays FrameTiming reports, /diagnostics' robot time."""
    from node_driver import Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: len(d.chunks) >= 15 and len(d.timings) >= 15, 30.0,
                     "15 action chunks and their FrameTiming")
        seen = time.monotonic()
        delays = [m.rtc_delay_steps for _, m in list(d.timings)]
        r = d.ask(QUESTION, timeout_s=8.0)
        return {"delays": delays, "answer": r, "robot_time": d.diag_values_after(seen, "robot time")}
    finally:
        d.close()


# ----------------------------------------------------------------- tests

@pytest.fixture(scope="module", params=["tiny", "qwen3vl-tiny"])
def run(request):
    """The 10 s run of the pi0.5-style tiny model, and of the Qwen3-VL one (three-axis RoPE,
    XR-0's action head): the same contract over DDS."""
    with node_processes() as start:
        node = start(autostart=True, narration_every_n_frames=10, memory_every_n_frames=20,
                     model=request.param)
        result = run_peers(__file__, {"driver": ["ten_hz_run", node.namespace]}, timeout=90)["driver"]
        result["alive"] = node.alive()
        print(f"10 Hz run: {result['chunks']} chunks in {WINDOW_S:.0f} s, max gap {result['max_gap_s']:.3f} s, "
              f"question answered in {result['question_window_s']:.2f} s "
              f"(max chunk gap meanwhile {result['question_max_gap_s']:.3f} s by stamp, "
              f"{result['question_max_recv_gap_s']:.3f} s by arrival)")
        yield result


@pytest.mark.ros
def test_chunks_arrive_at_rate_with_joint_names_and_increasing_times(run):
    """At 10 Hz replanning, >= 90% of the chunks arrive over 10 s; every chunk names the
    configured joints, its points lie at strictly increasing times spaced at the ACTION
    rate (tiny.yaml: 12.5 Hz, 0.08 s: not the 0.1 s replanning period), counted from the
    observation's stamp; the points already past at publication were dropped, and the
    FrameTiming of the frame says how many."""
    assert run["alive"]
    assert run["chunks"] >= 0.9 * WINDOW_S / run["period_s"], run
    assert run["bad_names"] == 0 and run["not_increasing"] == 0
    assert run["positions_ok"] and max(run["points"]) <= 10
    assert run["spacing"] and all(abs(s - ACTION_DT) < 1e-6 for s in run["spacing"]), run["spacing"]
    first = run["first_tfs"][0]
    assert first == pytest.approx(round(first / ACTION_DT) * ACTION_DT)   # its own index x dt
    assert run["dropped_vs_points"] and all(d + n == 10 for d, n in run["dropped_vs_points"])
    assert run["stamps_increasing"]
    assert run["timings"] >= 0.9 * WINDOW_S / run["period_s"]
    assert run["period_ms"] == [100.0]


@pytest.mark.ros
def test_the_chunk_is_published_before_the_frame_decodes(run):
    """Chunk first: in every frame that decoded language, the trajectory left before
    admission and decoding began (chunk_ms + admit_ms + decode_ms <= total_ms, so chunk_ms <
    total_ms), and its latency from the observation is reported."""
    assert run["paired_frames"] >= 0.9 * run["frames"], run
    assert run["decoding_frames"] >= 20, run
    assert run["chunk_after_decode"] == [], run["chunk_after_decode"]
    assert all(0 < ms < 1000 for ms in run["chunk_latency_ms"]), run["chunk_latency_ms"]


@pytest.mark.ros
def test_text_deltas_concatenate_to_the_final_text(run):
    """For every request that finished, its TextChunk deltas (narration, memory, answer)
    concatenate to its full_text, and token counts never decrease."""
    done = [r for r in run["text"] if r["done"]]
    streams = {r["stream"] for r in done}
    assert {"narration", "memory", "answer"} <= streams, run["text"]
    for r in done:
        assert r["concat"] == r["full_text"], r
        assert r["token_counts"] == sorted(r["token_counts"]), r


@pytest.mark.ros
def test_question_answered_while_chunks_keep_flowing(run):
    """A progress question gets a successful answer equal to its /answer stream's text, and
    the chunk gaps while it is decoded stay under two control periods."""
    a = run["answer"]
    assert a["success"] and not a["error"], a
    answers = [r for r in run["text"] if r["stream"] == "answer" and r["done"]]
    assert any(r["full_text"] == a["answer"] for r in answers)
    assert run["question_chunks"] >= 2
    assert run["question_max_gap_s"] < 2 * run["period_s"], run


@pytest.mark.ros
@pytest.mark.parametrize("model", ["tiny", "qwen3vl-tiny"])
def test_rtc_guides_every_chunk_after_the_first_and_says_so(start_node, model):
    """rtc_mode guided over DDS: the first chunk after activation is sampled plainly (a log
    line says why), every later one is guided over a measured delay >= 1 step, shown in
    FrameTiming and /diagnostics; a question is still answered. pi0.5's expert (tiny) and
    XR-0's head (qwen3vl-tiny, flow time the other way round) alike."""
    node = start_node(autostart=True, rtc_mode="guided", narration_every_n_frames=5, model=model)
    r = run_peers(__file__, {"driver": ["rtc_run", node.namespace]}, timeout=60)["driver"]
    delays, rt = r["delays"], r["robot_time"]
    assert "first chunk after activation: nothing to continue, plain sampling" in node.log()
    # every later chunk guided, apart from input gaps (a loaded machine can delay inputs until
    # the previous chunk has ended: nothing to continue, said in the log); counted, not timed
    gaps = int(rt["rtc_input_gaps"])
    assert rt.get("rtc_mode") == "guided" and int(rt["rtc_plain_chunks"]) - gaps == 1, rt
    assert delays[0] == 0 and len(delays) >= 15 and sum(d == 0 for d in delays[1:]) <= gaps, (delays, rt)
    guided = int(rt["rtc_guided_chunks"])
    assert guided >= 1 and guided + int(rt["rtc_plain_chunks"]) >= 15 and "rtc_delays_clamped" in rt, rt
    assert gaps == 0 or "input gap: the previous chunk ended" in node.log()
    assert r["answer"]["success"], r["answer"]


def asap_run(namespace, *, deadline):
    from node_driver import Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: len(d.chunks) >= 3, 30.0, "three action chunks")
        t0 = time.monotonic()
        time.sleep(3.0)
        return {"chunks": d.chunks_since(t0)}
    finally:
        d.close()


@pytest.mark.ros
def test_replanning_asap_runs_frames_back_to_back(start_node):
    """replanning: asap ignores the 1 Hz tick: frames (tiny: tens of ms) follow each other,
    so far more than 3 chunks arrive in 3 s."""
    node = start_node(autostart=True, replanning="asap", control_rate_hz=1.0)
    r = run_peers(__file__, {"driver": ["asap_run", node.namespace]}, timeout=60)["driver"]
    assert r["chunks"] >= 15, r
    assert "replanning asap" in node.log()


RESPONSIVE_S = 0.45      # a lifecycle or ask_progress call's bar while slow frames compute


@pytest.mark.ros
def test_services_and_diagnostics_stay_responsive_while_slow_frames_compute(start_node):
    """With frames far over the 0.1 s period (1024 decode steps of a long narration per
    frame), lifecycle and ask_progress calls answer within 0.45 s, under the shortest frame
    (> 0.5 s) a call waiting for a frame would take, /diagnostics keeps its 1 Hz, and overrun
    ticks are skipped: no burst of back-to-back catch-up chunks. (0.3 s was once missed by
    3 ms on the 2-core CI machine: DDS and the GIL's share, not a blocked service.)"""
    node = start_node(autostart=True, max_new_tokens=4096, narration_max_tokens=4096,
                      steps_per_frame=1024, narration_every_n_frames=1, memory_every_n_frames=0)
    r = run_peers(__file__, {"driver": ["slow_frames_run", node.namespace]}, timeout=60)["driver"]
    # the premise: every frame is longer than the bar, so a call that waited for one would miss it
    # (a fresh-clone CI run had a shortest frame of 499.6 ms against the 500 once asserted here)
    assert r["frame_ms"] and min(r["frame_ms"]) > 1000 * RESPONSIVE_S, r["frame_ms"]
    assert r["calls"] >= 10
    assert r["state_max_s"] < RESPONSIVE_S and r["ask_max_s"] < RESPONSIVE_S, r
    assert len(r["diag_gaps"]) >= 3 and max(r["diag_gaps"]) < 1.5, r["diag_gaps"]
    assert r["chunk_gaps"] and min(r["chunk_gaps"]) > 0.4, r["chunk_gaps"]
    assert "skipped" in node.log()


if __name__ == "__main__":
    run_as_peer({"ten_hz_run": ten_hz_run, "slow_frames_run": slow_frames_run, "rtc_run": rtc_run,
                 "asap_run": asap_run})
