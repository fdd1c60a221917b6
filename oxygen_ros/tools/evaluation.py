"""`oxygen eval`: episodes of the real node, the simulated Panda and the recorder as separate
processes over DDS, each episode's bag scored from the sim's ground truth (issue 41's
evaluation contract).

An episode: `oxygen sim --seed S` (one per robot; --lockstep with --clock sim), `oxygen record`
(one per robot) and oxygen_node with the run's params file, configured once the recorders are
up and activated once they matched its publishers (so the bag has every frame), for a fixed
duration after the node's first frame or until the cube's place is final (in the bowl for
`settle_s`). Episode time runs on the stamps of the sim's /tf from the first frame's
observation stamp: sim time with --clock sim, wall time with --clock wall.

Scoring: tools/eval_scoring.py.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import cube_place
from .bag_task import task_summary
from .eval_scoring import episode_line, score_bag, summarize
from .sim_robots import SimRobot, fleet_robot_names

MATCH_TIMEOUT_S = 20.0
SIM_CLOCK_TICK_HZ = 10.0      # one robot on the sim clock: the node's wall ticks (its compute paces it)


# -- running episodes ---------------------------------------------------------------------------
@dataclass
class Options:
    params: Path
    seeds: list
    out: Path
    clock: str = "sim"                 # sim | wall
    language: str = "on"               # off | on
    questions_every_s: float = 0.0
    question: str = "what have you done?"
    rtc: str = ""                      # "" : the params file's; off | guided
    robots: int = 0                    # 0: one robot (not a fleet)
    blackout: bool = False
    duration_s: float = 20.0
    settle_s: float = 1.0
    rate_hz: float = 0.0               # the node's wall rate: 0 = measured as `oxygen demo` measures it
    image_size: int = 128
    record_cameras: bool = False
    startup_timeout_s: float = 600.0
    episode_timeout_s: float = 0.0     # wall seconds after the first frame; 0: 60 + 40 x duration
    domain_id: int | None = None


@dataclass
class _Watch:
    """One robot's live view of an episode: first frame, the cube's place on /tf."""
    start_stamp: float | None = None   # the first frame's observation stamp
    last_stamp: float | None = None    # of the latest /tf
    place: str | None = None
    place_since: float | None = None
    questions: list = field(default_factory=list)    # (episode time s, AskProgress future)

    def elapsed(self) -> float:
        if self.start_stamp is None or self.last_stamp is None:
            return 0.0
        return self.last_stamp - self.start_stamp

    def final(self, settle_s: float) -> bool:
        return (self.place == "bowl" and self.place_since is not None and self.start_stamp is not None
                and self.last_stamp - max(self.place_since, self.start_stamp) >= settle_s)

    def unfinished(self, duration_s: float, settle_s: float) -> str | None:
        """Why the episode ended before its duration without the cube's place being final
        (the wall-time limit stopped it): not the policy's outcome. None when it finished."""
        if self.start_stamp is None:
            return "no frame for this robot"
        if self.elapsed() >= duration_s or self.final(settle_s):
            return None
        return f"stopped by the wall-time limit at {self.elapsed():.1f} of {duration_s:g} s of episode time"


def question_samples(questions: list, question: str) -> list[dict]:
    """The questions asked in an episode, each with its answer (answered: the node's
    response came, with success, before the episode's processes were stopped)."""
    out = []
    for asked_s, future in questions:
        r = future.result() if future.done() else None
        out.append({"asked_s": asked_s, "question": question, "answered": bool(r is not None and r.success),
                    "answer": r.answer if r is not None else "",
                    "error": (r.error if r is not None else "no response before the episode ended"),
                    "latency_s": round(float(r.latency_s), 3) if r is not None else None})
    return out


def run_params(opts: Options, params: dict) -> dict:
    """The params file's values with the run's options applied (written once for the node,
    the sims and the recorders)."""
    p = dict(params)
    if opts.language == "off":          # no narration, memory or questions
        p["narration_every_n_frames"] = 0
        p["memory_every_n_frames"] = 0
    if opts.rtc:
        p["rtc_mode"] = opts.rtc
    if opts.robots:
        p["robots"] = fleet_robot_names(params, opts.robots)
    elif p.get("robots"):
        p["robots"] = []
    return p


class Evaluation:
    """Runs the episodes; `say` prints a line (progress)."""

    def __init__(self, opts: Options, say=print, stop=None):
        import threading

        from .params_files import params_from_file

        self.opts, self.say = opts, say
        self.stop = stop or threading.Event()
        self.params = run_params(opts, params_from_file(opts.params))
        opts.out.mkdir(parents=True, exist_ok=True)
        self.params_path = opts.out / "params.yaml"
        self._write_params()
        self.robot_names = list(self.params.get("robots") or []) or [""]
        self.rate_hz = float(self.params["control_rate_hz"])   # the node's replanning rate
        self.episodes: list[dict] = []
        self._measured = False

    def _write_params(self) -> None:
        import yaml

        self.params_path.write_text(yaml.safe_dump({"/**": {"ros__parameters": self.params}}, sort_keys=False))

    def groups(self) -> list[list[int]]:
        """The seeds of each episode: one per robot (a fleet's robots get consecutive seeds)."""
        n = len(self.robot_names)
        return [self.opts.seeds[i:i + n] for i in range(0, len(self.opts.seeds), n)]

    def run(self) -> dict:
        groups = self.groups()
        total = len(self.opts.seeds)
        for k, seeds in enumerate(groups):
            if self.stop.is_set():
                break
            refusal = None
            try:
                episode = self._episode(k, seeds)
            except _ConfigureRefused as refused:
                episode, refusal = refused.episode, refused
            for e in episode:
                self.episodes.append(e)
                self.say(episode_line(len(self.episodes), total, e))
            if refusal:     # the same params file for every episode: each would be refused alike
                self.say(f"stopped: {str(refusal).splitlines()[0]} (the other {total - len(self.episodes)} seeds "
                         "would be refused the same way)")
                break
        return self.result()

    def result(self) -> dict:
        o = self.opts
        per_robot = {}
        for name in self.robot_names:
            per_robot[name or "robot"] = summarize([e for e in self.episodes if e["robot"] == name])
        asking = o.language != "off" and o.questions_every_s > 0     # --language questions
        return {"clock": o.clock, "params": str(o.params), "model": self.params.get("model"),
                "language": "questions" if asking else o.language,
                "questions_every_s": o.questions_every_s if asking else 0.0, "rtc": self.params.get("rtc_mode"),
                "robots": len(self.robot_names) if self.params.get("robots") else 1, "blackout": o.blackout,
                "duration_s": o.duration_s, "settle_s": o.settle_s, "node_control_rate_hz": self.rate_hz,
                "sim_period_s": 1.0 / float(self.params["control_rate_hz"]) if o.clock == "sim" else None,
                "seeds": o.seeds, "node_params": self.params,      # as the node got them (the file may change)
                "overall": summarize(self.episodes), "per_robot": per_robot, "episodes": self.episodes}

    # -- one episode ------------------------------------------------------------------------------
    def _episode(self, k: int, seeds: list[int]) -> list[dict]:
        from .child_processes import Children

        folder = self.opts.out / f"episode-{k:03d}"
        robots = [SimRobot(name, self._robot_params(name), folder / (f"{name}-seed{seed}" if name else f"seed{seed}"),
                           seed) for name, seed in zip(self.robot_names, seeds)]
        children = Children(folder / "logs", env=os.environ.copy())
        t0 = time.monotonic()
        error = refused = None
        watches = {}
        try:
            watches = self._run_children(robots, children)
        except _ConfigureRefused as e:
            error, refused = str(e), e
        except _EpisodeError as e:
            error = str(e)
        finally:
            # the node first, the recorders last: the bags keep the last messages
            children.stop_all(["node", *(r.child("sim") for r in robots)])
        wall = time.monotonic() - t0
        out = []
        for r in robots:
            e = {"robot": r.name, "seed": r.seed, "episode": k, "bag": str(r.out / "bag"), "wall_s": round(wall, 2)}
            w = watches.get(r.name)
            if error is None and (r.out / "bag" / "metadata.yaml").is_file():
                try:
                    start = w.start_stamp if w else None
                    end = min(self.opts.duration_s, w.elapsed()) if start is not None else None
                    e.update(score_bag(r.out / "bag", end, start))
                    e["report_task"] = task_summary(r.out / "bag")
                    asked = question_samples(w.questions if w else [], self.opts.question)
                    e.update(questions=len(asked), answers=sum(q["answered"] for q in asked), question_samples=asked)
                    unfinished = w.unfinished(self.opts.duration_s, self.opts.settle_s) if w else "not watched"
                    if unfinished:
                        e["error"] = unfinished
                except Exception as ex:  # noqa: BLE001 - one bad bag is that episode's failure, not the run's
                    e["error"] = f"scoring failed: {type(ex).__name__}: {ex}"
            else:
                e["error"] = error or "no closed bag"
            if e.get("error"):
                e.update(success=False, narrations=0, narrations_right=0, length_s=None)
            out.append(e)
        if refused is not None:
            refused.episode = out
            raise refused
        return out

    def _robot_params(self, name: str) -> dict:
        from .params_files import robot_params

        return robot_params(self.params, name)

    def _sim_argv(self, r: SimRobot, first: bool) -> list[str]:
        o = self.opts
        argv = [sys.executable, "-m", "oxygen_ros.cli", "sim", "--params", str(self.params_path), "--quiet",
                "--namespace", r.namespace, "--image-size", str(o.image_size), "--seed", str(r.seed)]
        own_joints = (self.params.get(r.name) or {}).get("joint_names") if r.name else None
        if own_joints:
            argv += ["--joints", ",".join(own_joints)]
        if o.clock == "sim":       # a fleet's sims keep step: the first one's /clock waits for the others
            peers = [n for n in self.robot_names if n and n != r.name]
            argv += ["--lockstep"] + ((["--lockstep-peers", ",".join(f"/{n}" for n in peers)] if peers else [])
                                      if first else ["--no-clock"])
        else:
            from .demo_rate import sim_camera_hz

            argv += ["--camera-hz", f"{sim_camera_hz(self.rate_hz):g}", "--joint-hz", "50"]
        return argv + (["--blackout"] if o.blackout else [])

    def _run_children(self, robots: list[SimRobot], children) -> dict:
        from .bag_recorder import BagRecorder

        o = self.opts
        py = sys.executable
        for i, r in enumerate(robots):
            r.out.mkdir(parents=True, exist_ok=True)
            children.start(r.child("sim"), self._sim_argv(r, i == 0))
            children.start(r.child("recorder"), [
                py, "-m", "oxygen_ros.cli", "record", "--out", str(r.out / "bag"), "--params", str(self.params_path),
                "--namespace", r.namespace, "--quiet", *(["--cameras"] if o.record_cameras else [])])
        for r in robots:
            for name, ready in ((r.child("recorder"), "recording "), (r.child("sim"), "sim: ")):
                if not children.children[name].wait_for_line(ready, 60.0, self.stop):
                    raise _EpisodeError(f"{name} did not start: {children.children[name].log_tail(600)}")
        # the node's wall rate, measured once beside the first episode's robots as `oxygen demo`
        # does. With --clock sim the sim's period stays the params file's (sim time per chunk); a
        # wall rate the machine holds only leaves the sim time to answer before the next tick
        # (else the node acts on the same observation twice: repeated_observation_frames)
        if o.rate_hz > 0:
            self.rate_hz = o.rate_hz
        elif o.clock == "sim" and len(robots) == 1:
            # one lock-step robot: tick fast and act on each observation as soon as it comes (a
            # tick without a new one does nothing); a fleet's ticks keep the measured spacing so
            # its robots' observations, published together, land in one frame
            self.rate_hz = SIM_CLOCK_TICK_HZ
        elif not self.episodes and not self._measured:
            self._measure_rate()
        awaits = []
        for r in robots:
            awaits += ["-p", f"{r.name + '.' if r.name else ''}await_recorders:=[{BagRecorder.NODE_NAME}]"]
        children.start("node", [py, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(self.params_path),
                                "-p", "autostart:=false", "-p", f"control_rate_hz:={self.rate_hz!r}",
                                "-p", f"use_sim_time:={'true' if o.clock == 'sim' else 'false'}",
                                # lock-step: a tick before the sim's next observation makes no chunk
                                "-p", f"new_observations_only:={'true' if o.clock == 'sim' else 'false'}",
                                *awaits])
        return self._watch(robots, children)

    def _measure_rate(self) -> None:
        from .demo_rate import holdable_rate_hz, measure_frame_ms

        robots = self.params.get("robots") or []
        frame_ms = measure_frame_ms(self.params, self.opts.image_size, robots=robots)
        configured = float(self.params["control_rate_hz"])
        self.rate_hz = holdable_rate_hz(frame_ms, configured)
        self._measured = True
        self.say(f"measured frames {min(frame_ms):.0f}-{max(frame_ms):.0f} ms beside the robot and recorder: "
                 f"the node runs at {self.rate_hz:g} Hz (params file: {configured:g} Hz)")

    def _watch(self, robots: list[SimRobot], children) -> dict:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from .demo_monitor import DemoMonitor

        node = rclpy.create_node(f"oxygen_eval_{os.getpid()}_{len(self.episodes)}")
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        try:
            watches = {r.name: _Watch() for r in robots}
            mons = {r.name: DemoMonitor(node, r.params, lambda _line: None, namespace=r.namespace)
                    for r in robots}
            for r in robots:
                self._subscribe(node, r, watches[r.name])
            self._start_node(robots, children, mons[robots[0].name], executor)
            self._run_episode(robots, children, watches, mons, executor)
            return watches
        finally:
            executor.shutdown(timeout_sec=1.0)
            node.destroy_node()

    def _subscribe(self, node, r: SimRobot, w: _Watch) -> None:
        from oxygen_msgs.msg import FrameTiming
        from tf2_msgs.msg import TFMessage

        from ..node import qos
        from .bag_recorder import resolve

        latest = {}

        def on_tf(msg) -> None:
            stamp = None
            for t in msg.transforms:
                child = t.child_frame_id.lstrip("/")
                if t.header.frame_id.lstrip("/") == "world" and child in ("cube", "bowl", "gripper"):
                    v = t.transform.translation
                    latest[child] = (v.x, v.y, v.z)
                    stamp = t.header.stamp.sec + t.header.stamp.nanosec * 1e-9
            if stamp is None or len(latest) < 3:
                return
            place = cube_place.place(latest["cube"], latest["bowl"], latest["gripper"])
            if place != w.place:
                w.place, w.place_since = place, stamp
            w.last_stamp = stamp if w.last_stamp is None else max(w.last_stamp, stamp)

        def on_timing(msg) -> None:
            if w.start_stamp is None:
                s = msg.observation_stamp
                w.start_stamp = s.sec + s.nanosec * 1e-9

        node.create_subscription(TFMessage, resolve("tf", r.namespace), on_tf, 100)
        node.create_subscription(FrameTiming, resolve(r.params.get("frame_timing_topic", "frame_timing"),
                                                      r.namespace), on_timing, qos.CONTROL)

    def _pump(self, executor, children, timeout: float, what: str) -> None:
        executor.spin_once(timeout_sec=timeout)
        dead = children.dead()
        if dead:
            raise _EpisodeError(f"{dead[0].name} exited (code {dead[0].proc.returncode}) {what}: "
                                f"{dead[0].log_tail(1500)}")
        if self.stop.is_set():
            raise _EpisodeError("interrupted")

    def _start_node(self, robots, children, mon, executor) -> None:
        """Configure, wait for the recorders to match the node's publishers, activate, wait for
        the first frame (as `oxygen demo` does: the bag then has every frame)."""
        from .bag_recorder import BagRecorder

        end = time.monotonic() + self.opts.startup_timeout_s

        def until(done, what: str, limit: float | None = None) -> None:
            stop_at = min(end, time.monotonic() + limit) if limit else end
            while not done():
                self._pump(executor, children, 0.05, f"waiting for {what}")
                if time.monotonic() > stop_at:
                    raise _EpisodeError(f"gave up waiting for {what}: {children.children['node'].log_tail(1500)}")

        def transition(label: str) -> None:
            future = mon.transition(label)
            until(future.done, f"oxygen_node to {label}")
            if not future.result().success:
                tail = children.children["node"].log_tail(1500)
                errors = [line for line in tail.splitlines() if "[ERROR]" in line]
                error = _ConfigureRefused if label == "configure" else _EpisodeError
                raise error(f"oxygen_node refused to {label}: " + (f"{errors[-1]}\n{tail}" if errors else tail))

        until(mon.lifecycle_client.service_is_ready, "oxygen_node's lifecycle service")
        # an answered probe first: the configure, sent once, then is not lost to discovery
        until(mon.lifecycle_answers(), "oxygen_node's first lifecycle response")
        transition("configure")
        for r in robots:
            rec = children.children[r.child("recorder")]
            until(lambda: rec.has_line(BagRecorder.MATCHED), f"{rec.name} to match the node", MATCH_TIMEOUT_S)
        transition("activate")
        until(lambda: mon.t_first is not None, "the first frame")

    def _run_episode(self, robots, children, watches, mons, executor) -> None:
        o = self.opts
        limit = o.episode_timeout_s or 60.0 + 40.0 * o.duration_s
        t0 = time.monotonic()
        while True:
            self._pump(executor, children, 0.05, "during the episode")
            live = [watches[r.name] for r in robots]
            if all(w.elapsed() >= o.duration_s or w.final(o.settle_s) for w in live):
                return
            if time.monotonic() - t0 > limit:
                self.say(f"episode stopped after {limit:.0f} s of wall time (episode time "
                         f"{min(w.elapsed() for w in live):.1f} of {o.duration_s:g} s)")
                return
            if o.questions_every_s > 0 and o.language != "off":
                for r in robots:
                    w = watches[r.name]
                    if w.elapsed() >= o.questions_every_s * (len(w.questions) + 1):
                        future = mons[r.name].ask(o.question)
                        if future is not None:
                            w.questions.append((round(w.elapsed(), 3), future))


class _EpisodeError(RuntimeError):
    pass


class _ConfigureRefused(_EpisodeError):
    """The node refused its params file: every episode would be refused alike. `episode`:
    the refused episode's records, set before it propagates to the run."""
    episode: list[dict]


def isolate_dds(domain_id: int | None = None) -> int:
    """Localhost-only DDS on a random domain for this process and its children (before rclpy
    initialises)."""
    import random

    domain = domain_id if domain_id is not None else random.SystemRandom().randint(1, 100)
    os.environ.update(ROS_LOCALHOST_ONLY="1", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                      ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
    os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    return domain
