#!/usr/bin/env python3
"""Lifecycle cycles (not in CI): oxygen_node with the smol profile, configured, activated,
deactivated and cleaned up over and over beside the simulated robot.

Starts `oxygen sim` and oxygen_node (--params, default config/demo.yaml, autostart false) in a
namespace of their own, then this process drives --cycles cycles through the node's lifecycle
services. Per cycle it records each transition's duration and result; the node's RSS (VmRSS
of /proc/PID/status) while active (once the cycle's frames ran) and after cleanup; and the
first chunk: the time from sending activate to the first JointTrajectory, both as published
(the first FrameTiming's end stamp less what followed the chunk in that frame: the node's
clock, which is this machine's wall clock) and as received here (later when this process
itself waits for a CPU), then --frames more frames to measure the frame time of that cycle.

On time: the first chunk is published within one control period plus one frame time after
activate was sent, the frame time being the longest FrameTiming.total_ms of the same cycle's
later frames (the longest: on a shared machine frames vary by a second from one to the next).
The period allows for the inputs: the subscriptions are new at each configure, so their
first messages come just after activation (until they do, the loop polls them;
node/frame_loop.py). A first frame slower than every later one counts against it.

The summary compares the RSS after warm-up (the cleanup of cycle 5: allocator arenas and
caches fill during the first cycles) with the last cycle's, and gives the first-chunk
latency min/median/max. Exit 1 on a failed transition or a late or missing first chunk (or,
with --max-growth-mb, more RSS growth than that after warm-up).

    nice -n 19 .venv/bin/python scripts/lifecycle_cycles.py                  # 50 cycles, smol
    nice -n 19 .venv/bin/python scripts/lifecycle_cycles.py --cycles 5 --params config/tiny.yaml --json c.json

DDS stays on this machine (localhost only, a random domain).
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = 5
TRANSITIONS = ("configure", "activate", "deactivate", "cleanup")


def ros_env() -> dict:
    return {**os.environ, "ROS_LOCALHOST_ONLY": "1", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
            "ROS_DOMAIN_ID": str(random.randint(1, 100)), "PYTHONUNBUFFERED": "1"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_for(condition, timeout: float, what: str, period: float = 0.01) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(period)


class Client:
    """Lifecycle calls to the node and what it publishes, timed on arrival (its executor spins
    in a thread of its own)."""

    def __init__(self, ns: str, params: dict):
        import rclpy
        from lifecycle_msgs.srv import ChangeState, GetState
        from oxygen_msgs.msg import FrameTiming
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from trajectory_msgs.msg import JointTrajectory

        from oxygen_ros.node import qos
        from oxygen_ros.node.cameras import transport_of

        rclpy.init()
        self.rclpy, self.ChangeState, self.GetState = rclpy, ChangeState, GetState
        self.node = rclpy.create_node(f"lifecycle_cycles_{uuid.uuid4().hex[:6]}")
        self.chunks, self.frames = [], []          # arrival times; (arrival, FrameTiming)
        self.node.create_subscription(JointTrajectory, f"{ns}/joint_trajectory",
                                      lambda m: self.chunks.append(time.monotonic()), qos.CONTROL)
        self.node.create_subscription(FrameTiming, f"{ns}/frame_timing",
                                      lambda m: self.frames.append((time.monotonic(), m)), qos.CONTROL)
        # the robot's inputs, to start once they flow (the sim's first renders take seconds)
        self.inputs = {"camera": 0, "joints": 0}
        cam = params["camera_topics"][0]
        raw = transport_of(cam, (params.get("camera_transports") or ["auto"])[0]) == "raw"
        self.node.create_subscription(Image if raw else CompressedImage, f"{ns}/{cam}",
                                      lambda m: self.inputs.update(camera=self.inputs["camera"] + 1), qos.SENSOR)
        self.node.create_subscription(JointState, f"{ns}/{params['joint_state_topic']}",
                                      lambda m: self.inputs.update(joints=self.inputs["joints"] + 1), qos.SENSOR)
        self.change = self.node.create_client(ChangeState, f"{ns}/oxygen_node/change_state")
        self.get = self.node.create_client(GetState, f"{ns}/oxygen_node/get_state")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self._spinner.start()

    def call(self, client, request, timeout: float, what: str, attempt_s: float = 4.0):
        """Idempotent calls only: one without a response after attempt_s is sent again (a first
        call can lose its response to Fast DDS discovery even after service_is_ready)."""
        end = time.monotonic() + timeout
        wait_for(client.service_is_ready, timeout, f"service {client.srv_name}")
        while True:
            future = client.call_async(request)
            try:
                wait_for(future.done, max(0.0, min(attempt_s, end - time.monotonic())), what)
                return future.result()
            except TimeoutError:
                client.remove_pending_request(future)
                if time.monotonic() >= end:
                    raise

    def ready(self, timeout: float) -> str:
        """The node's state, once an unknown transition (refused, no effect) got its response:
        from then on a transition, sent once, is not lost to discovery."""
        probe = self.ChangeState.Request()
        probe.transition.label = "no_such_transition"
        self.call(self.change, probe, timeout, "a probe transition")
        return self.call(self.get, self.GetState.Request(), timeout, "GetState").current_state.label

    def transition(self, label: str, timeout: float) -> tuple[bool, float]:
        """(success, seconds); a transition is not idempotent, so it is sent once."""
        req = self.ChangeState.Request()
        req.transition.label = label
        t0 = time.monotonic()
        future = self.change.call_async(req)
        try:
            wait_for(future.done, timeout, f"response to {label}")
        except TimeoutError:
            return False, time.monotonic() - t0
        return bool(future.result().success), time.monotonic() - t0

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown()


def one_cycle(i: int, c: Client, pid: int, period_s: float, args) -> dict:
    r = {"cycle": i, "s": {}, "ok": {}}

    def step(label: str) -> bool:
        r["ok"][label], r["s"][label] = c.transition(label, args.transition_timeout)
        return r["ok"][label]

    if step("configure"):
        sent, sent_wall = time.monotonic(), time.time()
        if step("activate"):
            try:
                wait_for(lambda: c.chunks and c.chunks[-1] > sent, args.chunk_timeout, "first chunk")
                r["first_chunk_received_s"] = next(t for t in c.chunks if t > sent) - sent
                # frame_index counts from 0 at each activation (a fresh engine per configure)
                wait_for(lambda: sum(t > sent and m.frame_index > 0 for t, m in c.frames) >= args.frames,
                         args.chunk_timeout, f"{args.frames} frames after the first")
                later = [m for t, m in c.frames if t > sent and m.frame_index > 0]
                r["frame_s"] = max(m.total_ms for m in later) / 1e3
                r["chunk_s"] = statistics.median(m.chunk_ms for m in later) / 1e3
                f0 = next((m for t, m in c.frames if t > sent and m.frame_index == 0), None)
                if f0 is None:
                    raise TimeoutError("FrameTiming of frame 0 lost")
                r["first_frame_s"] = f0.total_ms / 1e3
                # published: the frame's end (node clock = this wall clock) less what followed the chunk
                end = f0.header.stamp.sec + f0.header.stamp.nanosec * 1e-9
                r["first_chunk_s"] = end - (f0.total_ms - f0.chunk_ms) / 1e3 - sent_wall
                r["first_chunk_frame_s"] = f0.chunk_ms / 1e3          # the rest: waiting for inputs
                r["on_time"] = r["first_chunk_s"] <= period_s + r["frame_s"]
            except TimeoutError as e:
                r["error"] = str(e)
            r["rss_active_mb"] = rss_mb(pid)
            step("deactivate")
        step("cleanup")
    r["rss_cleanup_mb"] = rss_mb(pid)
    return r


def passed(r: dict) -> bool:
    return len(r["ok"]) == len(TRANSITIONS) and all(r["ok"].values()) and r.get("on_time") is True


def line(r: dict, n: int, period_s: float) -> str:
    steps = " ".join(f"{k} {r['s'][k]:.2f}s{'' if r['ok'][k] else ' FAILED'}" for k in r["s"])
    if "first_chunk_s" in r and "frame_s" in r:
        chunk = (f"first chunk {r['first_chunk_s']:.2f} s (<= {period_s:.2f} + {r['frame_s']:.2f}: "
                 f"{'on time' if r['on_time'] else 'LATE'}; received {r['first_chunk_received_s']:.2f} s; "
                 f"inputs {r['first_chunk_s'] - r['first_chunk_frame_s']:.2f} + chunk {r['first_chunk_frame_s']:.2f} "
                 f"s into frame 0, {r['chunk_s']:.2f} s into later frames)")
    else:
        chunk = f"first chunk: {r.get('error', 'none')}"
    active = f"{r['rss_active_mb']:.0f}" if "rss_active_mb" in r else "-"
    return (f"[{r['cycle']:3d}/{n}] {'ok  ' if passed(r) else 'FAIL'} {steps} | {chunk} | RSS active {active} MB, "
            f"after cleanup {r['rss_cleanup_mb']:.0f} MB")


def summary(results: list, period_s: float, args) -> dict:
    n = len(results)
    base = results[min(WARM_UP, n) - 1]
    latencies = [r["first_chunk_s"] for r in results if "first_chunk_s" in r]
    received = [r["first_chunk_received_s"] for r in results if "first_chunk_received_s" in r]
    frames = [r["frame_s"] for r in results if "frame_s" in r]       # each cycle's longest
    active = [r["rss_active_mb"] for r in results if "rss_active_mb" in r]
    s = {
        "cycles": n, "period_s": period_s,
        "rss_cleanup_after_warm_up_mb": round(base["rss_cleanup_mb"], 1),
        "rss_cleanup_last_mb": round(results[-1]["rss_cleanup_mb"], 1),
        "rss_growth_after_warm_up_mb": round(results[-1]["rss_cleanup_mb"] - base["rss_cleanup_mb"], 1),
        "rss_active_after_warm_up_mb": round(active[min(WARM_UP, len(active)) - 1], 1) if active else None,
        "rss_active_last_mb": round(active[-1], 1) if active else None,
        "first_chunk_s": {"min": min(latencies), "median": statistics.median(latencies),
                          "max": max(latencies)} if latencies else None,
        "first_chunk_received_s": {"min": min(received), "median": statistics.median(received),
                                   "max": max(received)} if received else None,
        "frame_s_longest_median": statistics.median(frames) if frames else None,
        "late": [r["cycle"] for r in results if r.get("on_time") is False],
        "no_chunk": [r["cycle"] for r in results if "error" in r],
        "failed_transitions": [(r["cycle"], k) for r in results for k, ok in r["ok"].items() if not ok],
    }
    s["ok"] = (all(passed(r) for r in results)
               and (args.max_growth_mb is None or s["rss_growth_after_warm_up_mb"] <= args.max_growth_mb))
    return s


def start(name: str, argv: list, env: dict, out: Path) -> subprocess.Popen:
    log = open(out / f"{name}.log", "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            cwd=ROOT, start_new_session=True)


def stop(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--params", default=str(ROOT / "config" / "demo.yaml"))
    ap.add_argument("--frames", type=int, default=3, help="frames after the first chunk, for the frame time")
    ap.add_argument("--image-size", type=int, default=128, help="simulated camera image size")
    ap.add_argument("--transition-timeout", type=float, default=300.0, help="seconds a transition may take")
    ap.add_argument("--chunk-timeout", type=float, default=60.0, help="seconds to wait for the first chunk")
    ap.add_argument("--max-growth-mb", type=float, default=None,
                    help="also fail when RSS after cleanup grows more than this after warm-up")
    ap.add_argument("--out", default="", help="folder for the node's and the sim's logs (default: a temp dir)")
    ap.add_argument("--json", default="", help="write every cycle's figures and the summary here")
    args = ap.parse_args()

    from oxygen_ros.tools.demo_rate import sim_camera_hz
    from oxygen_ros.tools.params_files import params_from_file

    params = params_from_file(Path(args.params))
    period_s = 1.0 / float(params["control_rate_hz"])
    if params.get("model") == "smol" and not params.get("checkpoint"):
        from oxygen_ros.engine.registry import family     # convert the GGUF once, before cycle 1

        family("smollm2").ensure_cached(None, progress=sys.stdout)
    env = ros_env()
    os.environ.update({k: env[k] for k in ("ROS_LOCALHOST_ONLY", "ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    out = Path(args.out or tempfile.mkdtemp(prefix="lifecycle_cycles_"))
    out.mkdir(parents=True, exist_ok=True)
    ns = f"/cycles_{uuid.uuid4().hex[:8]}"
    py = [sys.executable, "-m", "oxygen_ros.cli"]
    sim = start("sim", [*py, "sim", "--params", args.params, "--namespace", ns, "--quiet", "--image-size",
                        str(args.image_size), "--camera-hz", f"{sim_camera_hz(1.0 / period_s):g}",
                        "--joint-hz", "50"], env, out)
    node = start("node", [sys.executable, "-m", "oxygen_ros.node", "--ros-args", "--params-file", args.params,
                          "-p", "autostart:=false", "-r", f"__ns:={ns}"], env, out)
    print(f"node pid {node.pid}, sim pid {sim.pid}, namespace {ns}, domain {env['ROS_DOMAIN_ID']}, "
          f"period {period_s:.2f} s; logs in {out}", flush=True)
    client, results, rss_start = None, [], None
    try:
        wait_for(lambda: "sim: " in (out / "sim.log").read_text(errors="replace") or sim.poll() is not None,
                 120, "simulated robot")
        if sim.poll() is not None:
            raise SystemExit("the sim exited:\n" + (out / "sim.log").read_text()[-3000:])
        client = Client(ns, params)
        wait_for(lambda: all(client.inputs.values()), 120, "camera image and joint state from the sim")
        state = client.ready(120.0)
        if state != "unconfigured":
            raise SystemExit(f"the node is {state}, not unconfigured")
        rss_start = rss_mb(node.pid)
        for i in range(1, args.cycles + 1):
            r = one_cycle(i, client, node.pid, period_s, args)
            results.append(r)
            print(line(r, args.cycles, period_s), flush=True)
            if node.poll() is not None:
                print(f"the node exited ({node.returncode}); its log: {out / 'node.log'}", flush=True)
                break
    except KeyboardInterrupt:
        pass
    finally:
        if client is not None:
            client.close()
        stop([node, sim])
    if not results:
        return 1
    s = summary(results, period_s, args)
    s["rss_before_first_configure_mb"] = round(rss_start, 1)
    fc = s["first_chunk_s"]
    print(f"{s['cycles']} cycles, period {period_s:.2f} s, longest frame of a cycle: median "
          f"{s['frame_s_longest_median'] or 0:.2f} s")
    print(f"RSS after cleanup: {rss_start:.0f} MB before the first configure, "
          f"{s['rss_cleanup_after_warm_up_mb']:.0f} MB after warm-up (cycle "
          f"{min(WARM_UP, len(results))}), {s['rss_cleanup_last_mb']:.0f} MB at the end "
          f"({s['rss_growth_after_warm_up_mb']:+.1f} MB); while active {s['rss_active_after_warm_up_mb']} -> "
          f"{s['rss_active_last_mb']} MB")
    if fc:
        fr = s["first_chunk_received_s"]
        print(f"first chunk after activate: published min {fc['min']:.2f} s, median {fc['median']:.2f} s, max "
              f"{fc['max']:.2f} s; received min {fr['min']:.2f} s, median {fr['median']:.2f} s, max {fr['max']:.2f} s")
    print(f"late first chunks: {s['late'] or 'none'}; no first chunk: {s['no_chunk'] or 'none'}; "
          f"failed transitions: {s['failed_transitions'] or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "cycles": results}, indent=2))
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
