"""`oxygen demo`: the whole loop on this machine for about a minute, then the report.

Starts the simulated robot (`oxygen sim`: the MuJoCo Panda), the recorder (`oxygen record`)
and oxygen_node with the params file (default config/demo.yaml: SmolLM2 on the CPU), which
it configures and activates only once the recorder has matched the node's publishers (the
bag gets every frame); prints the narration and memory lines as they finish, asks "what
have you done?" half way through and prints the answer; then stops everything (node,
robot, recorder, in that order, so the bag keeps the last messages), writes summary.json, timeline.png and
demo.mp4 (the scene camera with the text as captions, and its still demo.png) next to
the bag and prints the timing summary and the output folder.
Every child runs in its own session and is stopped on exit, Ctrl-C or SIGTERM included.
DDS stays on this machine (ROS_LOCALHOST_ONLY=1, ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST)
on a random ROS_DOMAIN_ID unless --domain-id is given.
"""
import argparse
import os
import random
import signal
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

STATUS_EVERY_S = 10.0
MATCH_TIMEOUT_S = 20.0     # for the recorder to match the configured node's publishers (localhost DDS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", metavar="YAML", help="the node's params file (default: config/demo.yaml)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds to run after the first frame")
    p.add_argument("--out", help="output folder (default: out/demo-<date-time> in the checkout)")
    p.add_argument("--question", default="what have you done?", help="asked through ~/ask_progress")
    p.add_argument("--ask-at", type=float, default=None, help="seconds after the first frame (default: half-way)")
    p.add_argument("--startup-timeout", type=float, default=900.0,
                   help="seconds to wait for the node's first frame (model loading)")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: random 1..100)")
    p.add_argument("--image-size", type=int, default=128, help="simulated camera image size")
    p.add_argument("--rate", type=float, default=0.0, metavar="HZ",
                   help="control rate; 0: measure a few frames first and use the params file's rate "
                        "or the highest this machine holds, whichever is lower")
    p.add_argument("--compressed", choices=("jpeg", "png"), default="",
                   help="cameras as sensor_msgs/CompressedImage on <topic>/compressed (the node decodes them)")
    p.add_argument("--record-cameras", action=argparse.BooleanOptionalAction, default=True,
                   help="the bag also holds the camera frames (5 Hz, JPEG) and joint states: for `oxygen "
                        "play`, the arm's tracking in the report and the video (default: on)")
    p.add_argument("--camera-hz", type=float, default=0.0,
                   help="simulated camera rate (0: 3x the control rate, 5..10 Hz; the CPU runs the model too)")


def _default_out() -> Path:
    from oxygen_ros.tools.params_files import checkout_root

    base = checkout_root() or Path.cwd()
    return base / "out" / datetime.now().strftime("demo-%Y%m%d-%H%M%S")


class _Console:
    """print() plus a transcript file (demo.txt in the output folder)."""

    def __init__(self, path: Path):
        self._f = open(path, "w")
        self._lock = threading.Lock()

    def __call__(self, line: str = "") -> None:
        with self._lock:
            print(line, flush=True)
            self._f.write(line + "\n")
            self._f.flush()

    def close(self) -> None:
        self._f.close()


def _prepare_weights(params: dict, say) -> None:
    """The smol profile converts its GGUF once (tens of seconds): do it here, with progress."""
    checkpoint = str(params.get("checkpoint") or "")
    if params.get("model") != "smol" or (checkpoint and not checkpoint.endswith(".gguf")):
        return
    from oxygen_ros.engine.registry import family

    say("checking the SmolLM2 weights cache (the first run converts the GGUF: tens of seconds) ...")
    cached = family("smollm2").ensure_cached(params.get("checkpoint") or None, progress=sys.stdout)
    say(f"weights: {cached.weights} ({'converted now' if cached.converted else 'cached'})")


def _choose_rate(args, params: dict, say) -> float:
    """--rate, or the params file's rate lowered to what this machine holds (tools/demo_rate.py)."""
    configured = float(params["control_rate_hz"])
    if args.rate > 0:
        say(f"control rate {args.rate:g} Hz (--rate; the params file says {configured:g} Hz)")
        return args.rate
    from oxygen_ros.tools.demo_rate import MARGIN, holdable_rate_hz, measure_frame_ms

    say(f"measuring this machine: a few frames of model {params.get('model')} with "
        f"{params.get('steps_per_frame')} decode steps per frame (--rate HZ skips this) ...")
    frame_ms = measure_frame_ms(params, args.image_size)
    rate = holdable_rate_hz(frame_ms, configured)
    verdict = ("holds it" if rate == configured else
               f"cannot hold {configured:g} Hz: running at {rate:g} Hz instead")
    say(f"frames took {min(frame_ms):.0f}-{max(frame_ms):.0f} ms (median {statistics.median(frame_ms):.0f}) "
        f"beside the running robot and recorder; with x{MARGIN:g} headroom for the node's own threads "
        f"and DDS, this machine {verdict} (params file: {configured:g} Hz)")
    return rate


def _compressed_params(params: dict, path: Path) -> Path:
    """The params file with every camera on image_transport's <topic>/compressed, written to
    `path` for the node, the robot and the recorder alike."""
    import yaml

    from oxygen_ros.node.cameras import compressed_topic

    params["camera_topics"] = [compressed_topic(t) for t in params.get("camera_topics", [])]
    params["camera_transports"] = ["auto"] * len(params["camera_topics"])
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}, sort_keys=False))
    return path


def _node_log_lines(child, offset: int):
    """New lines of the node's log worth showing (configure/activate, errors); new offset."""
    try:
        with open(child.log, errors="replace") as f:
            f.seek(offset)
            text = f.read()
    except OSError:
        return [], offset
    end = text.rfind("\n") + 1
    keep = [line for line in text[:end].splitlines()
            if any(k in line for k in ("configured in", "active:", "configure failed", "Traceback"))]
    return keep, offset + len(text[:end].encode())


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.tools.child_processes import Children
    from oxygen_ros.tools.params_files import config_file, params_from_file

    params_path = Path(args.params) if args.params else config_file("demo.yaml")
    params = params_from_file(params_path)
    out = Path(args.out) if args.out else _default_out()
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    if args.compressed:
        params_path = _compressed_params(params, out / "params.yaml")
    say = _Console(out / "demo.txt")
    domain = args.domain_id if args.domain_id is not None else random.SystemRandom().randint(1, 100)
    os.environ.update(ROS_LOCALHOST_ONLY="1", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                      ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
    os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    ask_at = args.duration / 2 if args.ask_at is None else args.ask_at
    say(f"oxygen demo: model {params.get('model')} from {params_path}, {args.duration:g} s after the first "
        f"frame, question at {ask_at:g} s")
    say(f"output folder: {out}")
    say(f"DDS: ROS_DOMAIN_ID={domain}, localhost only")

    try:
        _prepare_weights(params, say)      # nothing started yet: Ctrl-C simply ends it
    except KeyboardInterrupt:
        say("interrupted")
        say.close()
        return 130

    stop = threading.Event()
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    children = Children(out / "logs", env=os.environ.copy())
    status = 1
    try:
        status = _run_children(args, params, params_path, out, say, children, stop, ask_at)
    finally:
        if children.children:
            say("stopping: oxygen_node, sim, recorder ...")
            codes = children.stop_all(["node", "sim", "recorder"])
            left = [c.name for c in children.children.values() if c.alive()]
            say(f"all processes ended ({', '.join(f'{n} exit {c}' for n, c in codes.items())})"
                if not left else f"STILL RUNNING: {left}")
        if interrupted:
            say(f"interrupted ({interrupted[0]})")
            status = 130
        _report(out, say)
        say(f"output folder: {out}")
        say.close()
    return status


def _run_children(args, params, params_path, out, say, children, stop, ask_at) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from oxygen_ros.tools.demo_monitor import DemoMonitor, clean

    py = sys.executable
    from oxygen_ros.tools.demo_rate import sim_camera_hz

    camera_hz = args.camera_hz or sim_camera_hz(params.get("control_rate_hz", 10.0))
    # joint states at 50 Hz, not the sim's 100: the node reads one state per frame (a few
    # Hz here) and every message costs its executor, beside the model, on the same cores
    children.start("sim", [py, "-m", "oxygen_ros.cli", "sim", "--params", str(params_path), "--quiet",
                           "--image-size", str(args.image_size), "--camera-hz", f"{camera_hz:g}",
                           "--joint-hz", "50", *(["--compressed", args.compressed] if args.compressed else [])])
    children.start("recorder", [py, "-m", "oxygen_ros.cli", "record", "--out", str(out / "bag"),
                                "--params", str(params_path), "--quiet",
                                *(["--cameras"] if args.record_cameras else [])])
    # the node last, once the recorder subscribes and the robot publishes: the bag gets every frame
    for name, ready in (("recorder", "recording "), ("sim", "sim: ")):
        if not children.children[name].wait_for_line(ready, 60.0, stop):
            say(f"{name} did not start; its log:\n" + children.children[name].log_tail())
            return 130 if stop.is_set() else 1
    # measured while the robot renders and the recorder records: they share the CPU with the node
    params["control_rate_hz"] = _choose_rate(args, params, say)
    if stop.is_set():
        return 130
    # not autostarted: _start_node() activates it once the recorder matched its publishers
    children.start("node", [py, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(params_path),
                            "-p", "autostart:=false", "-p", f"control_rate_hz:={float(params['control_rate_hz'])!r}"])
    say("started: " + ", ".join(f"{c.name} (pid {c.pid})" for c in children.children.values())
        + f"; logs in {children.log_dir}")

    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("oxygen_demo")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        mon = DemoMonitor(node, params, say)
        return _watch(args, children, mon, executor, say, stop, ask_at, clean)
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown()


def _watch(args, children, mon, executor, say, stop, ask_at, clean) -> int:
    node_child = children.children["node"]
    t0 = time.monotonic()
    log_offset = 0

    def pump(timeout: float, when: str) -> bool:
        """Spin once and echo the node's new log lines; False if a child has exited."""
        nonlocal log_offset
        executor.spin_once(timeout_sec=timeout)
        lines, log_offset = _node_log_lines(node_child, log_offset)
        for line in lines:
            say(f"node: {line.strip()}")
        dead = children.dead()
        if dead:
            say(f"{dead[0].name} exited (code {dead[0].proc.returncode}) {when}; its log:\n"
                + dead[0].log_tail())
        return not dead

    # 1. until the first frame: model loading, the recorder matching, activation
    failed = _start_node(args, children, mon, say, stop, pump, t0)
    if failed is not None:
        return failed
    say(f"{mon.stamp()} first action chunk after {time.monotonic() - t0:.1f} s; running for {args.duration:g} s")
    cpu_start = {c.name: c.cpu_s() for c in children.children.values()}, time.monotonic()

    # 2. the run: status lines, the question, then wait for its answer
    future, asked_at, answered = None, None, False
    next_status = STATUS_EVERY_S
    answer_deadline = None
    while not stop.is_set():
        if not pump(0.05, "during the run"):
            return 1
        t = mon.elapsed()
        if t >= next_status:
            next_status += STATUS_EVERY_S
            say(mon.status_line())
        if asked_at is None and t >= ask_at:
            future = mon.ask(args.question)
            if future is not None:
                asked_at = t
                say(f"{mon.stamp()} asking: {args.question!r}")
        if future is not None and not answered and future.done():
            answered = True
            r = future.result()
            if r.success:
                say(f"{mon.stamp()} answer after {r.latency_s:.1f} s: {clean(r.answer, 400)}")
            else:
                say(f"{mon.stamp()} no answer: {r.error}")
        if t >= args.duration:
            if asked_at is None or answered:
                break
            if answer_deadline is None:
                answer_deadline = time.monotonic() + 180.0
                say(f"{mon.stamp()} waiting for the answer before stopping ...")
            if time.monotonic() > answer_deadline:
                say(f"{mon.stamp()} no answer within 180 s after the run")
                break
    if stop.is_set():
        return 130
    if mon.elapsed() - (next_status - STATUS_EVERY_S) > 1.0:     # unless one was just printed
        say(mon.status_line())
    say(_cpu_line(children, *cpu_start))
    return 0 if answered and mon.frames else 1


def _start_node(args, children, mon, say, stop, pump, t0: float) -> int | None:
    """Configure the node, wait until the recorder's readers matched its publishers, activate
    it and wait for its first frame: so the bag has every frame from frame 0 on (DDS matches
    topic by topic; an autostarted node's first frames went out before some readers matched).
    None once the first frame arrived, else the exit code (having said why)."""
    from oxygen_ros.tools.bag_recorder import BagRecorder

    node, recorder = children.children["node"], children.children["recorder"]
    last_wait = t0

    def until(done, what: str, timeout: float, log=node) -> bool:
        """Pump until done(); False (said why) on a stop, a dead child or the timeout."""
        nonlocal last_wait
        begun = time.monotonic()
        end = min(begun + timeout, t0 + args.startup_timeout)
        while not done():
            if stop.is_set() or not pump(0.1, f"waiting for {what}"):
                return False
            now = time.monotonic()
            if now > end:
                say(f"gave up waiting for {what} after {now - begun:.0f} s; the {log.name}'s log:\n"
                    + log.log_tail())
                return False
            if now - last_wait >= 10.0:
                last_wait = now
                say(f"waiting for {what} ({now - t0:.0f} s) ...")
        return True

    def transition(label: str, what: str) -> bool:
        future = mon.transition(label)
        if not until(future.done, what, args.startup_timeout):
            return False
        if not future.result().success:
            say(f"oxygen_node refused to {label}; its log:\n" + node.log_tail())
        return future.result().success

    started = (until(mon.lifecycle_client.service_is_ready, "oxygen_node's lifecycle service",
                     args.startup_timeout)
               # an unknown transition (refused, no effect) first: its response proves the way
               # back works, so the configure, sent once, is not lost to discovery
               and until(mon.transition("no_such_transition").done, "oxygen_node's first lifecycle response",
                         args.startup_timeout)
               and transition("configure", "oxygen_node to load the model and configure")
               and until(lambda: recorder.has_line(BagRecorder.MATCHED),
                         "the recorder to match oxygen_node's publishers", MATCH_TIMEOUT_S, log=recorder)
               and transition("activate", "oxygen_node to activate")
               and until(lambda: mon.t_first is not None, "the first frame", args.startup_timeout))
    return None if started else 130 if stop.is_set() else 1


def _cpu_line(children, cpu_start: dict, t_start: float) -> str:
    """Each child's CPU share over the run, in % of one core."""
    elapsed = time.monotonic() - t_start
    shares = []
    for c in children.children.values():
        now, then = c.cpu_s(), cpu_start.get(c.name)
        if now is not None and then is not None and elapsed > 0:
            shares.append(f"{c.name} {100 * (now - then) / elapsed:.0f}%")
    return (f"CPU over the run, % of one core ({os.cpu_count()} cores): {', '.join(shares)}" if shares
            else "CPU over the run: not measured")


def _report(out: Path, say) -> None:
    from oxygen_ros.tools.bag_summary import format_summary
    from oxygen_ros.tools.report import write_report

    bag = out / "bag"
    if not (bag / "metadata.yaml").is_file():
        say(f"no closed bag at {bag}; no report")
        return
    try:
        summary = write_report(bag, out, title=f"oxygen demo: {out.name}")
    except Exception as e:  # noqa: BLE001 - the run's outputs stay; say why there is no report
        say(f"report failed: {type(e).__name__}: {e}")
        return
    counts = ", ".join(f"{t.rsplit('/', 1)[-1]} {v['messages']}" for t, v in summary["topics"].items())
    say(f"bag: {bag} ({counts})")
    say("timing summary:")
    for line in format_summary(summary).splitlines():
        say("  " + line)
    say(f"wrote {out / 'summary.json'} and {out / 'timeline.png'}")
    from oxygen_ros.tools.report_video import VideoError, write_video

    try:
        write_video(bag, out / "demo.mp4", log=say)
    except VideoError as e:      # recorded without cameras
        say(f"no video: {e}")
    except Exception as e:  # noqa: BLE001 - the report stays; say why there is no video
        say(f"video failed: {type(e).__name__}: {e}")
