#!/usr/bin/env python3
"""Soak benchmark (not in CI): the demo profile for an hour with a question every few seconds.

Starts the simulated robot, oxygen_node (config/demo.yaml, at the rate this machine holds:
tools/demo_rate.py, or --rate) and `oxygen record` as child processes, asks ~/ask_progress
every --ask-every seconds, and per --bucket seconds records the node's RSS, deadline
misses, the p99 interval between action chunks, and answer latencies. At the end it
checks that the bag reads to its end. Writes JSON and a PNG:

    .venv/bin/python scripts/soak.py --minutes 60          # -> docs/results/soak_demo.{json,png}
    .venv/bin/python scripts/soak.py --params config/tiny.yaml --rate 10 --minutes 10 --name soak_tiny
    .venv/bin/python scripts/soak.py --minutes 2 --out /tmp/soak

A question's timeout (--timeout 0, the default) is two full answers' time at the chosen
rate (answer_max_tokens / steps_per_frame frames each, one answering ahead): at a rate
lowered to what a slow CPU holds, a fixed 30 s would refuse every question.
RSS growth is reported after a warm-up (the first sixth of the run, --warmup-minutes).

DDS stays on this machine (localhost only, a random domain).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None


def interrupt(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def percentile(values, q):
    import numpy as np

    return float(np.percentile(values, q)) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--params", default=str(ROOT / "config" / "demo.yaml"))
    ap.add_argument("--ask-every", type=float, default=5.0, help="seconds between questions")
    ap.add_argument("--bucket", type=float, default=30.0, help="seconds per reported interval")
    ap.add_argument("--rate", type=float, default=0.0, help="control rate (Hz); 0: measure what this machine holds")
    ap.add_argument("--timeout", type=float, default=0.0,
                    help="each question's timeout_s; 0: two full answers' time at the chosen rate (at least 30 s)")
    ap.add_argument("--warmup-minutes", type=float, default=None, help="left out of the RSS growth (default: a sixth)")
    ap.add_argument("--record", action=argparse.BooleanOptionalAction, default=True, help="run `oxygen record` too")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results"), help="folder for NAME.{json,png}")
    ap.add_argument("--name", default="soak_demo", help="file name of the figures")
    ap.add_argument("--memory-trace", type=float, default=0.0, metavar="S",
                    help="the node prints where its memory grows every S seconds (node/memory_trace.py) to its log")
    args = ap.parse_args()
    warmup_s = 60.0 * (args.minutes / 6 if args.warmup_minutes is None else args.warmup_minutes)
    os.environ.update(ROS_LOCALHOST_ONLY="1", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                      ROS_DOMAIN_ID=str(random.SystemRandom().randint(1, 100)), PYTHONUNBUFFERED="1")

    import rclpy
    from oxygen_msgs.msg import FrameTiming
    from oxygen_msgs.srv import AskProgress
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions
    from trajectory_msgs.msg import JointTrajectory

    from oxygen_ros.node import qos
    from oxygen_ros.tools.child_processes import Children
    from oxygen_ros.tools.demo_rate import holdable_rate_hz, measure_frame_ms, sim_camera_hz
    from oxygen_ros.tools.params_files import params_from_file

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    params = params_from_file(Path(args.params))
    env = {**os.environ, **({"OXYGEN_MEMORY_TRACE": f"{args.memory_trace:g}"} if args.memory_trace else {})}
    children = Children(ROOT / "out" / f"{args.name}_logs", env=env)   # out/ is git-ignored
    py = sys.executable
    configured = float(params["control_rate_hz"])
    # a kill stops the soak as Ctrl-C does: the figures so far are still written
    signal.signal(signal.SIGTERM, interrupt)
    try:
        sim = children.start("sim", [py, "-m", "oxygen_ros.cli", "sim", "--params", args.params, "--quiet",
                                     "--image-size", "128", "--camera-hz", f"{sim_camera_hz(configured):g}"])
        if not sim.wait_for_line("sim: ", 60.0):
            raise SystemExit("the simulated robot did not start:\n" + sim.log_tail())
        if args.rate > 0:
            rate = args.rate
        else:
            print("measuring the rate this machine holds (beside the running sim, as the demo does) ...", flush=True)
            rate = holdable_rate_hz(measure_frame_ms(params, 128), configured)
        timeout = args.timeout or question_timeout_s(params, rate)
        print(f"control rate {rate:g} Hz (params file {configured:g} Hz); questions every {args.ask_every:g} s "
              f"with timeout_s {timeout:.0f}", flush=True)
        bag = ROOT / "out" / f"{args.name}_bag"           # out/ is git-ignored
        if args.record:
            shutil.rmtree(bag, ignore_errors=True)
            children.start("recorder", [py, "-m", "oxygen_ros.cli", "record", "--out", str(bag),
                                        "--params", args.params, "--quiet"])
        node_child = children.start("node", [py, "-m", "oxygen_ros.node", "--ros-args", "--params-file",
                                             args.params, "-p", "autostart:=true", "-p", f"control_rate_hz:={rate!r}"])
    except BaseException:                  # Ctrl-C while measuring: no child outlives the script
        children.stop_all()
        raise
    # without rclpy's handlers: a signal must not invalidate the context under the loop
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("oxygen_soak")
    chunks, timings, answers = [], [], []          # (t, ...) since the first chunk
    node.create_subscription(JointTrajectory, "/joint_trajectory",
                             lambda m: chunks.append(time.monotonic()), qos.CONTROL)
    node.create_subscription(FrameTiming, "/frame_timing",
                             lambda m: timings.append((time.monotonic(), bool(m.deadline_missed),
                                                       float(m.total_ms))), qos.CONTROL)
    client = node.create_client(AskProgress, "/oxygen_node/ask_progress", qos_profile=qos.SERVICES)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    rss, died, t0, interrupted = [], [], None, False
    try:
        while not chunks:
            if children.dead():
                print("a child exited before the first chunk:\n" + children.dead()[0].log_tail())
                return 1
            time.sleep(0.2)
        t0 = time.monotonic()
        end = t0 + 60.0 * args.minutes
        next_ask, next_rss, next_print = t0, t0, t0 + 60.0
        while time.monotonic() < end and not children.dead():
            now = time.monotonic()
            if now >= next_ask and client.service_is_ready():
                next_ask += args.ask_every
                sent = now
                future = client.call_async(AskProgress.Request(question="what have you done?", timeout_s=timeout))
                future.add_done_callback(lambda f, s=sent: answers.append(
                    (s, time.monotonic() - s, bool(f.result().success), f.result().error)))
            if now >= next_rss:
                next_rss += 5.0
                rss.append((now, rss_mb(node_child.pid)))
            if now >= next_print:
                next_print += 60.0
                misses = sum(m for t, m, _ in timings if t >= t0)
                print(f"[{(now - t0) / 60:4.1f} min] {len(chunks)} chunks, {misses} deadline misses, "
                      f"{len(answers)} answers, node RSS {rss[-1][1]:.0f} MB", flush=True)
            time.sleep(0.05)
        died = [c.name for c in children.dead()]
    except KeyboardInterrupt:              # Ctrl-C: stop early, still write what was measured
        print("interrupted: writing the figures so far", flush=True)
        end, interrupted = time.monotonic(), True
    finally:
        executor.shutdown(timeout_sec=2.0)
        node.destroy_node()
        rclpy.try_shutdown()
        codes = children.stop_all(["node", "recorder", "sim"] if args.record else ["node", "sim"])
    if t0 is None:                         # interrupted before the first chunk: nothing measured
        return 130
    report = summarise(t0, end, args.bucket, rate, chunks, timings, answers, rss, codes, warmup_s)
    report["died_early"] = died
    report["question_timeout_s"] = timeout
    report["bag"] = read_bag(bag) if args.record else None
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=2))
    plot(report, out / f"{args.name}.png", Path(args.params).stem)
    o = report["overall"]

    def f(key, fmt=".1f"):            # a figure, or "-" where the run was too short to have it
        return "-" if o[key] is None else format(o[key], fmt)

    print(f"soak: {o['minutes']:.1f} min at {rate:g} Hz: {o['chunks']} chunks, {o['deadline_misses']} deadline "
          f"misses ({100 * o['deadline_miss_fraction']:.2f}%), p99 chunk interval {f('chunk_interval_p99_s', '.2f')} s, "
          f"{o['answers']} questions ({o['answers_failed']} not answered: {o['failure_reasons']}; "
          f"{o['timed_out_after_acceptance']} timed out after acceptance), answer latency p50 "
          f"{f('answer_latency_p50_s')} s p99 {f('answer_latency_p99_s')} s, node RSS {f('rss_first_mb', '.0f')} -> "
          f"{f('rss_last_mb', '.0f')} MB, growth after warm-up {f('rss_growth_after_warmup_mb', '+.0f')} MB")
    b = report["bag"]
    if b is not None:
        print("bag: " + (b.get("error") or f"{b['messages']} messages over {b['span_s']:.0f} s, "
                                           f"the last chunk {b['chunks_until_end_s']:.1f} s before its end"))
    print(f"wrote {out / (args.name + '.json')} and {out / (args.name + '.png')}")
    if died:
        print(f"FAILED: {', '.join(died)} exited during the run (logs in {children.log_dir})")
    return 1 if died or (b and b.get("error")) else 130 if interrupted else 0


def question_timeout_s(params: dict, rate: float) -> float:
    """Two full answers' time at `rate`: one answering ahead, then this one (at least 30 s)."""
    frames = -(-int(params["answer_max_tokens"]) // max(1, int(params["steps_per_frame"])))
    return max(30.0, 2.0 * (frames + 1) / rate)


def read_bag(path: Path) -> dict:
    """The bag read to its end: message count, span, and how close to its end the last chunk is."""
    from rosbags.highlevel import AnyReader

    try:
        with AnyReader([path]) as reader:
            count, last_chunk, last = 0, None, None
            for conn, stamp, _raw in reader.messages():
                count, last = count + 1, stamp
                if conn.topic.endswith("joint_trajectory"):
                    last_chunk = stamp
            span = (reader.end_time - reader.start_time) / 1e9
    except Exception as exc:               # unreadable: that is the finding
        return {"error": f"bag unreadable: {exc}"}
    if last_chunk is None:
        return {"messages": count, "error": "no chunk in the bag"}
    return {"messages": count, "span_s": span, "chunks_until_end_s": (last - last_chunk) / 1e9}


def summarise(t0, end, bucket, rate, chunks, timings, answers, rss, codes, warmup_s=0.0) -> dict:
    chunks = [t for t in chunks if t >= t0]
    buckets = []
    t = t0
    while t < end - 1e-6:
        u = t + bucket
        cs = [c for c in chunks if t <= c < u]
        gaps = [b - a for a, b in zip(cs, cs[1:])]
        fr = [m for s, m, _ in timings if t <= s < u]
        ans = [lat for s, lat, ok, _ in answers if t <= s < u and ok]
        refused = sum(1 for s, _, ok, _ in answers if t <= s < u and not ok)
        mem = [m for s, m in rss if t <= s < u and m is not None]
        buckets.append({"t_min": (t - t0) / 60, "chunks": len(cs), "chunk_interval_p99_s": percentile(gaps, 99),
                        "frames": len(fr), "deadline_misses": sum(fr),
                        "answers": len(ans), "not_answered": refused, "answer_latency_mean_s": sum(ans) / len(ans) if ans else None,
                        "answer_latency_max_s": max(ans, default=None), "rss_mb": mem[-1] if mem else None})
        t = u
    gaps = [b - a for a, b in zip(chunks, chunks[1:])]
    lat = [lat for _, lat, ok, _ in answers if ok]
    reasons = {}
    for _, _, ok, error in answers:
        if not ok:
            # "cannot answer within N s", "timed out after N s ...", "too many questions in flight"
            key = re.sub(r"\d+(\.\d+)?", "N", error.split(":")[0].split("(")[0].split(";")[0]).strip()[:60]
            reasons[key] = reasons.get(key, 0) + 1
    frames = [m for s, m, _ in timings if s >= t0]
    timed_out = [error for _, _, ok, error in answers if not ok and error.startswith("timed out")]
    mem = [m for _, m in rss if m is not None]
    settled = [m for s, m in rss if m is not None and s >= t0 + warmup_s]
    return {"rate_hz": rate, "bucket_s": bucket, "exit_codes": codes, "buckets": buckets, "overall": {
        "minutes": (min(end, time.monotonic()) - t0) / 60, "chunks": len(chunks),
        "chunk_interval_p99_s": percentile(gaps, 99), "frames": len(frames),
        "deadline_misses": sum(frames), "deadline_miss_fraction": sum(frames) / max(1, len(frames)),
        "answers": len(answers), "answers_failed": sum(not ok for _, _, ok, _ in answers),
        # accepted, then no answer in time: what the deadline rule (docs/node.md, Questions) avoids
        "timed_out_after_acceptance": len(timed_out),
        "failure_reasons": reasons,
        # in full (estimate at admission and now): what the next look into one needs
        "timed_out_errors": timed_out,
        "answer_latency_p50_s": percentile(lat, 50), "answer_latency_p99_s": percentile(lat, 99),
        "rss_first_mb": mem[0] if mem else None, "rss_last_mb": mem[-1] if mem else None,
        "rss_max_mb": max(mem, default=None), "warmup_min": warmup_s / 60,
        "rss_growth_after_warmup_mb": settled[-1] - settled[0] if len(settled) > 1 else None}}


def plot(report: dict, path: Path, profile: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = report["buckets"]
    t = [x["t_min"] for x in b]
    fig, ax = plt.subplots(5, 1, figsize=(10, 11), sharex=True)
    series = [("node RSS (MB)", "rss_mb"), ("deadline misses per bucket", "deadline_misses"),
              ("p99 chunk interval (s)", "chunk_interval_p99_s"), ("answer latency mean, answered (s)", "answer_latency_mean_s"),
              ("questions not answered\n(refused or timed out)", "not_answered")]
    for a, (label, key) in zip(ax, series):
        a.plot(t, [x[key] if x[key] is not None else float("nan") for x in b], marker="o")
        a.set_ylabel(label, fontsize=8)
        a.grid(alpha=0.3)
    ax[2].axhline(1.0 / report["rate_hz"], color="gray", ls="--", lw=1)
    ax[-1].set_xlabel("minutes")
    fig.suptitle(f"oxygen soak: {profile} at {report['rate_hz']:g} Hz, a question every few seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
