"""`oxygen demo`: the whole loop on this machine for about a minute, then the report.

Starts the simulated robot (`oxygen sim`: the MuJoCo Panda), the recorder (`oxygen record`)
and oxygen_node with the params file (default config/smol_panda.yaml: the policy trained here,
which picks the red cube into the bowl and says where the cube is), which
it configures and activates only once the recorder has matched the node's publishers, with
its first frame held until the node sees the recorder too (`await_recorders`: the bag gets
every frame); prints the narration and memory lines as they finish, asks "what
have you done?" half way through and prints the answer; then stops everything (node,
robot, recorder, in that order, so the bag keeps the last messages), writes summary.json, timeline.png and
demo.mp4 (the scene camera with the text as captions, and its still demo.png) next to
the bag and prints the timing summary and the output folder.
With --robots N (fleet mode, default params config/fleet.yaml) one node serves N simulated
robots, each with its own sim, recorder and bag under its own namespace (/NAME/...); the
demo prints each robot's text, asks each robot the question and writes a report per robot
(the video: the first robot's).
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

from oxygen_ros.tools.sim_robots import SimRobot, fleet_robot_names

STATUS_EVERY_S = 10.0
MATCH_TIMEOUT_S = 20.0     # for the recorder to match the configured node's publishers (localhost DDS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", metavar="YAML",
                   help="the node's params file (default: config/smol_panda.yaml, the trained policy; with --robots: "
                        "config/fleet.yaml; config/demo.yaml: the random-weights smol profile)")
    p.add_argument("--robots", type=int, default=0, metavar="N",
                   help="fleet mode: one node serves N simulated robots (names from the params file's "
                        "`robots`, then robotK); 0: the params file's robots, or one robot")
    p.add_argument("--duration", type=float, default=60.0, help="seconds to run after the first frame")
    p.add_argument("--out", help="output folder (default: out/demo-<date-time> in the checkout)")
    p.add_argument("--question", default="what have you done?", help="asked through ~/ask_progress")
    p.add_argument("--ask-at", type=float, default=None, help="seconds after the first frame (default: half-way)")
    p.add_argument("--startup-timeout", type=float, default=900.0,
                   help="seconds to wait for the node's first frame (model loading)")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: random 1..100)")
    p.add_argument("--image-size", type=int, default=0,
                   help="simulated camera image size (default 128; 64 for a fleet, so it fits a small CPU)")
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


def _demo_robots(params: dict, out: Path) -> list[SimRobot]:
    robots = params.get("robots") or []
    if not robots:
        return [SimRobot("", params, out)]
    from oxygen_ros.tools.params_files import robot_params

    return [SimRobot(n, robot_params(params, n), out / n) for n in robots]


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
    """What the profile's family does once before its weights are read (the smol profile
    converts its GGUF: tens of seconds), here, with progress, before anything starts."""
    from oxygen_ros.engine.registry import prepare_weights

    prepare_weights(str(params.get("model") or ""), params.get("checkpoint") or None, say)


def _choose_rate(args, params: dict, say) -> float:
    """--rate, or the params file's rate lowered to what this machine holds (tools/demo_rate.py)."""
    configured = float(params["control_rate_hz"])
    if args.rate > 0:
        say(f"control rate {args.rate:g} Hz (--rate; the params file says {configured:g} Hz)")
        return args.rate
    from oxygen_ros.tools.demo_rate import MARGIN, holdable_rate_hz, measure_frame_ms

    robots = params.get("robots") or []
    say(f"measuring this machine: a few frames of model {params.get('model')} with "
        f"{params.get('steps_per_frame')} decode steps per frame"
        + (f", {len(robots)} robots batched" if robots else "") + " (--rate HZ skips this) ...")
    frame_ms = measure_frame_ms(params, args.image_size, robots=robots)
    rate = holdable_rate_hz(frame_ms, configured)
    verdict = ("holds it" if rate == configured else
               f"cannot hold {configured:g} Hz: running at {rate:g} Hz instead")
    say(f"frames took {min(frame_ms):.0f}-{max(frame_ms):.0f} ms (median {statistics.median(frame_ms):.0f}) "
        f"beside the running robot and recorder; with x{MARGIN:g} headroom for the node's own threads "
        f"and DDS, this machine {verdict} (params file: {configured:g} Hz)")
    return rate


def _compress_cameras(params: dict) -> None:
    """Every camera on image_transport's <topic>/compressed."""
    from oxygen_ros.node.cameras import compressed_topic

    params["camera_topics"] = [compressed_topic(t) for t in params.get("camera_topics", [])]
    params["camera_transports"] = ["auto"] * len(params["camera_topics"])


def _write_params(params: dict, path: Path) -> Path:
    """The params as the demo runs them, for the node, the robots and the recorders alike."""
    import yaml

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

    params_path = Path(args.params) if args.params else config_file("fleet.yaml" if args.robots else "smol_panda.yaml")
    params = params_from_file(params_path)
    out = Path(args.out) if args.out else _default_out()
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    robots = fleet_robot_names(params, args.robots)
    if args.compressed:
        _compress_cameras(params)
    if robots:
        params["robots"] = robots
    if args.compressed or args.robots:
        params_path = _write_params(params, out / "params.yaml")
    args.image_size = args.image_size or (64 if robots else 128)
    say = _Console(out / "demo.txt")
    domain = args.domain_id if args.domain_id is not None else random.SystemRandom().randint(1, 100)
    os.environ.update(ROS_LOCALHOST_ONLY="1", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                      ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
    os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    ask_at = args.duration / 2 if args.ask_at is None else args.ask_at
    say(f"oxygen demo: model {params.get('model')} from {params_path}, {args.duration:g} s after the first "
        f"frame, question at {ask_at:g} s"
        + (f"; fleet of {len(robots)} robots: {', '.join(robots)}" if robots else ""))
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

    demo_robots = _demo_robots(params, out)
    children = Children(out / "logs", env=os.environ.copy())
    status = 1
    try:
        status = _run_children(args, params, params_path, demo_robots, say, children, stop, ask_at)
    finally:
        if children.children:
            say("stopping: oxygen_node, sim, recorder ...")
            # the node first, the recorders last: the bags keep the last messages
            codes = children.stop_all(["node", *(r.child("sim") for r in demo_robots)])
            left = [c.name for c in children.children.values() if c.alive()]
            say(f"all processes ended ({', '.join(f'{n} exit {c}' for n, c in codes.items())})"
                if not left else f"STILL RUNNING: {left}")
        if interrupted:
            say(f"interrupted ({interrupted[0]})")
            status = 130
        for i, robot in enumerate(demo_robots):
            _report(robot, say, video=i == 0)
        say(f"output folder: {out}")
        say.close()
    return status


def _run_children(args, params, params_path, robots: list[SimRobot], say, children, stop, ask_at) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from oxygen_ros.tools.demo_monitor import DemoMonitor, clean
    from oxygen_ros.tools.demo_rate import sim_camera_hz

    py = sys.executable
    camera_hz = args.camera_hz or sim_camera_hz(params.get("control_rate_hz", 10.0))
    for robot in robots:
        own_joints = (params.get(robot.name) or {}).get("joint_names") if robot.name else None
        # joint states at 50 Hz, not the sim's 100: the node reads one state per frame (a few
        # Hz here) and every message costs its executor, beside the model, on the same cores
        children.start(robot.child("sim"), [
            py, "-m", "oxygen_ros.cli", "sim", "--params", str(params_path), "--quiet",
            "--namespace", robot.namespace, "--image-size", str(args.image_size), "--camera-hz", f"{camera_hz:g}",
            "--joint-hz", "50", *(["--compressed", args.compressed] if args.compressed else []),
            *(["--joints", ",".join(own_joints)] if own_joints else [])])
        children.start(robot.child("recorder"), [
            py, "-m", "oxygen_ros.cli", "record", "--out", str(robot.out / "bag"), "--params", str(params_path),
            "--namespace", robot.namespace, "--quiet", *(["--cameras"] if args.record_cameras else [])])
    # the node last, once the recorders subscribe and the robots publish: the bags get every frame
    for robot in robots:
        for name, ready in ((robot.child("recorder"), "recording "), (robot.child("sim"), "sim: ")):
            if not children.children[name].wait_for_line(ready, 60.0, stop):
                say(f"{name} did not start; its log:\n" + children.children[name].log_tail())
                return 130 if stop.is_set() else 1
    # measured while the robots render and the recorders record: they share the CPU with the node
    params["control_rate_hz"] = _choose_rate(args, params, say)
    if stop.is_set():
        return 130
    # not autostarted: _start_node() activates it once the recorders matched its publishers
    # and its first frame waits until the node sees each recorder subscribed (its own matching
    # can lag the recorder's on a loaded machine: node/recorder_wait.py)
    from oxygen_ros.tools.bag_recorder import BagRecorder

    awaits = []
    for r in robots:             # relative: the recorder in that robot's namespace
        awaits += ["-p", f"{r.name + '.' if r.name else ''}await_recorders:=[{BagRecorder.NODE_NAME}]"]
    children.start("node", [py, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(params_path),
                            "-p", "autostart:=false", "-p", f"control_rate_hz:={float(params['control_rate_hz'])!r}",
                            *awaits])
    say("started: " + ", ".join(f"{c.name} (pid {c.pid})" for c in children.children.values())
        + f"; logs in {children.log_dir}")

    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("oxygen_demo")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        mons = [DemoMonitor(node, r.params, say, namespace=r.namespace, label=r.label) for r in robots]
        return _watch(args, children, robots, mons, executor, say, stop, ask_at, clean)
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown()


def _watch(args, children, robots, mons, executor, say, stop, ask_at, clean) -> int:
    node_child = children.children["node"]
    t0 = time.monotonic()
    log_offset = 0
    first = mons[0]                      # the demo's clock: the first robot's first frame

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

    # 1. until the first frame: model loading, the recorders matching, activation
    failed = _start_node(args, children, robots, first, say, stop, pump, t0)
    if failed is not None:
        return failed
    say(f"{first.stamp()} first action chunk after {time.monotonic() - t0:.1f} s; running for {args.duration:g} s")
    cpu_start = {c.name: c.cpu_s() for c in children.children.values()}, time.monotonic()

    # 2. the run: status lines, the question (to every robot), then wait for the answers
    asked = {}                         # monitor index -> the call's future
    answered = set()
    next_status = STATUS_EVERY_S
    answer_deadline = None
    while not stop.is_set():
        if not pump(0.05, "during the run"):
            return 1
        t = first.elapsed()
        if t >= next_status:
            next_status += STATUS_EVERY_S
            for mon in mons:
                say(mon.status_line())
        for i, mon in enumerate(mons):
            if i not in asked and t >= ask_at:
                future = mon.ask(args.question)
                if future is not None:
                    asked[i] = future
                    say(f"{first.stamp()} {mon.label}asking: {args.question!r}")
        for i, future in asked.items():
            if i not in answered and future.done():
                answered.add(i)
                r = future.result()
                if r.success:
                    say(f"{first.stamp()} {mons[i].label}answer after {r.latency_s:.1f} s: {clean(r.answer, 400)}")
                else:
                    say(f"{first.stamp()} {mons[i].label}no answer: {r.error}")
        if t >= args.duration:
            if len(answered) == len(mons):
                break
            if answer_deadline is None:
                answer_deadline = time.monotonic() + 180.0
                say(f"{first.stamp()} waiting for the answers before stopping ...")
            if time.monotonic() > answer_deadline:
                say(f"{first.stamp()} no answer within 180 s after the run")
                break
    if stop.is_set():
        return 130
    if first.elapsed() - (next_status - STATUS_EVERY_S) > 1.0:     # unless one was just printed
        for mon in mons:
            say(mon.status_line())
    say(_cpu_line(children, *cpu_start))
    return 0 if len(answered) == len(mons) and all(m.frames for m in mons) else 1


def _start_node(args, children, robots, mon, say, stop, pump, t0: float) -> int | None:
    """Configure the node, wait until the recorders' readers matched its publishers, activate
    it and wait for its first frame: so the bags have every frame from frame 0 on (DDS
    matches topic by topic; an autostarted node's first frames went out before some readers
    matched). None once the first frame arrived, else the exit code (having said why)."""
    from oxygen_ros.tools.bag_recorder import BagRecorder

    node = children.children["node"]
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

    def recorders_matched() -> bool:
        for r in robots:
            rec = children.children[r.child("recorder")]
            if not until(lambda: rec.has_line(BagRecorder.MATCHED),
                         f"the {rec.name} to match oxygen_node's publishers", MATCH_TIMEOUT_S, log=rec):
                return False
        return True

    started = (until(mon.lifecycle_client.service_is_ready, "oxygen_node's lifecycle service",
                     args.startup_timeout)
               # an answered probe first: the configure, sent once, then is not lost to discovery
               and until(mon.lifecycle_answers(), "oxygen_node's first lifecycle response",
                         args.startup_timeout)
               and transition("configure", "oxygen_node to load the model and configure")
               and recorders_matched()
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


def _report(robot: SimRobot, say, video: bool = True) -> None:
    from oxygen_ros.tools.bag_summary_text import format_summary
    from oxygen_ros.tools.report import write_report

    bag, out = robot.out / "bag", robot.out
    if not (bag / "metadata.yaml").is_file():
        say(f"{robot.label}no closed bag at {bag}; no report")
        return
    try:
        summary = write_report(bag, out, title=f"oxygen demo: {out.name}")
    except Exception as e:  # noqa: BLE001 - the run's outputs stay; say why there is no report
        say(f"{robot.label}report failed: {type(e).__name__}: {e}")
        return
    counts = ", ".join(f"{t.rsplit('/', 1)[-1]} {v['messages']}" for t, v in summary["topics"].items())
    say(f"bag: {bag} ({counts})")
    say(f"{robot.label}timing summary:")
    for line in format_summary(summary).splitlines():
        say("  " + line)
    say(f"wrote {out / 'summary.json'} and {out / 'timeline.png'}")
    if not video:
        return
    from oxygen_ros.tools.report_video import VideoError, write_video

    try:
        write_video(bag, out / "demo.mp4", log=say)
    except VideoError as e:      # recorded without cameras
        say(f"no video: {e}")
    except Exception as e:  # noqa: BLE001 - the report stays; say why there is no video
        say(f"video failed: {type(e).__name__}: {e}")
