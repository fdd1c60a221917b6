"""oxygen_node: the OxyGen engine as a ROS 2 lifecycle node.

    ros2 run oxygen_ros oxygen_node --ros-args --params-file config/tiny.yaml
    .venv/bin/oxygen_node --ros-args --params-file config/tiny.yaml      (no ros2cli)

Lifecycle (ros2/demos lifecycle_py semantics):
  configure   read parameters, load the model, allocate the KV pool (the engine),
              create publishers, subscriptions and the diagnostics timer
  activate    start the control loop (a dedicated inference thread)
  deactivate  stop the loop; lifecycle publishers stop publishing
  cleanup     free the model, the pool and every ROS entity made by configure
  shutdown    from any state: stop, free, finalize
A failed configure logs why and returns FAILURE: the node stays unconfigured and can be
configured again (fix parameters with SetParameters in between).

The control loop runs in its own thread at control_rate_hz: the executor's threads stay
free for sensor callbacks, the ask_progress service and diagnostics while a frame
computes, and a frame that overruns skips the ticks it overlapped (no catch-up burst).
"""
from __future__ import annotations

import gc
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from oxygen_msgs.msg import FrameTiming, TextChunk
from oxygen_msgs.srv import AskProgress
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from sensor_msgs.msg import Image, JointState
from trajectory_msgs.msg import JointTrajectory

from ..engine.observation import ObservationError
from ..engine.policy_io import PolicyIOError
from ..engine.requests import LanguageRequest, RequestRejected
from . import diagnostics, qos
from . import params as node_params
from .cameras import Camera, per_camera, transport_of
from .chunk_plan import plan_chunk
from .convert import (InputError, decoder, frame_timing_msg, joint_positions, merge_deltas,
                      rgb_to_image, text_chunk_msg, trajectory_msg)
from .expert_outputs import expert_outputs, expert_positions
from .input_monitor import InputMonitor
from .joint_space import JointSpace
from .loop_stats import LoopStats
from .memory_log import MemoryLog, PromptTooLong
from .questions import QuestionBoard, QuestionRejected
from .robot_time import RobotTime, check_rtc_mode, warm_up_rtc
from .tick_clock import TickClock

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
LOG_THROTTLE_S = 2.0


@dataclass
class _Runtime:
    """Everything on_configure creates and on_cleanup frees."""
    p: dict
    joints: JointSpace                 # the state's joints (read from joint states)
    action_joints: JointSpace          # the joints the action dimensions drive; the envelope
    policy: object                     # engine.policy_io LimitsIO | PolicyIO
    model: object
    tok: object
    engine: object
    period_s: float
    cameras: dict                      # input name (resolved topic) -> Camera (slot, transport, view)
    joint_input: str
    monitor: InputMonitor
    stats: LoopStats
    robot_time: RobotTime              # action rate, chunk stamping, RTC, rate check
    memory: MemoryLog
    board: QuestionBoard
    pubs: dict = field(default_factory=dict)
    subs: list = field(default_factory=list)
    timer: object = None
    diag_pub: object = None
    stream_live: dict = field(default_factory=lambda: {"narration": None, "memory": None})
    skipped_requests: dict = field(default_factory=lambda: {"narration": 0, "memory": 0})
    clipped_points: int = 0            # published chunk points clipped into the joint limits
    experts: list = field(default_factory=list)   # node/expert_outputs.ExpertOutput per further expert


class OxygenNode(LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("oxygen_node", **kwargs)
        self._param_problems = {}
        for problem in node_params.declare_parameters(self):
            name = problem.split(":")[0].removeprefix("parameter ")
            self._param_problems[name] = problem
            self.get_logger().error(f"{problem} (the default is kept; configure will fail)")
        self.add_on_set_parameters_callback(self._check_parameters)
        self._sensor_group = ReentrantCallbackGroup()
        self._service_group = ReentrantCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self._loggers = {}
        self._state = "unconfigured"
        self._rt: _Runtime | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.create_service(AskProgress, "~/ask_progress", self._on_ask, qos_profile=qos.SERVICES,
                            callback_group=self._service_group)
        # Ctrl-C / SIGTERM shut the context down: stop the control loop before it publishes
        self.context.on_shutdown(self._stop.set)

    @property
    def executor_threads(self) -> int:
        # sensor callbacks, transitions, diagnostics, plus one per waiting question
        return 4 + self.get_parameter("max_concurrent_questions").value

    def _log(self, key: str):
        """A child logger per input/topic, so throttling one problem never hides another."""
        if key not in self._loggers:
            self._loggers[key] = self.get_logger().get_child(re.sub(r"\W+", "_", key).strip("_") or "x")
        return self._loggers[key]

    # -- parameters ----------------------------------------------------------------------
    def _check_parameters(self, params) -> SetParametersResult:
        frozen = [p.name for p in params
                  if p.name in node_params.SPEC and node_params.SPEC[p.name].when == "configure"]
        if frozen and self._rt is not None:
            return SetParametersResult(
                successful=False,
                reason=f"{', '.join(frozen)} apply at configure: cleanup the node, set, configure again")
        for p in params:
            self._param_problems.pop(p.name, None)
        return SetParametersResult(successful=True)

    # -- lifecycle -----------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        t0 = time.monotonic()
        try:
            if self._param_problems:
                raise ValueError("; ".join(self._param_problems.values()))
            self._rt = self._configure()
        except Exception as e:  # noqa: BLE001 - every failure becomes a FAILURE with its reason
            self.get_logger().error(f"configure failed: {type(e).__name__}: {e}")
            self._release()
            return FAILURE
        rt = self._rt
        self._state = "inactive"
        self.get_logger().info(
            f"configured in {time.monotonic() - t0:.1f} s: model {rt.p['model']}, KV pool "
            f"{rt.engine.pool.bytes_total / 2**20:.1f} MiB, {len(rt.cameras)} camera(s) -> "
            f"{[f'{c.slot} ({c.transport})' for c in rt.cameras.values()]}, "
            f"{len(rt.joints.names)} joints, replanning {rt.robot_time.replanning_text}, actions at "
            f"{rt.robot_time.action_rate_hz:g} Hz ({rt.robot_time.action_rate_source}), RTC "
            f"{rt.robot_time.rtc.config.mode}, policy I/O {rt.policy.convention} "
            f"({rt.policy.action_dims} action dims -> {list(rt.action_joints.names)})")
        return super().on_configure(state)

    def _configure(self) -> _Runtime:
        from .params import build_engine, build_policy_io

        p = node_params.read(self)
        joints = JointSpace.from_lists(p["joint_names"], p["joint_lower_limits"], p["joint_upper_limits"])
        action_joints = self._action_joints(p, joints)
        topics = p["camera_topics"]
        if len(set(topics)) != len(topics):
            raise ValueError(f"camera_topics has duplicates: {topics}")
        model, tok, engine = build_engine(p)
        cfg = model.cfg
        if len(topics) > len(cfg.camera_slots):
            raise ValueError(f"{len(topics)} camera_topics but model {cfg.name} has "
                             f"{len(cfg.camera_slots)} camera slots {list(cfg.camera_slots)}")
        policy = build_policy_io(p, model, tok, joints, action_joints)
        resolve = lambda t: self.resolve_topic_name(t)  # noqa: E731
        cameras = {resolve(t): Camera(resolve(t), slot, transport_of(t, transport), view)
                   for t, slot, (transport, view) in zip(topics, cfg.camera_slots, per_camera(p, len(topics)))}
        if any(c.transport == "compressed" for c in cameras.values()):
            self.get_logger().info(f"compressed cameras decoded with {decoder()[0]}")
        joint_input = resolve(p["joint_state_topic"])
        period_s = 1.0 / p["control_rate_hz"]
        check_rtc_mode(p["rtc_mode"], cfg)
        robot_time = RobotTime.from_params(p, policy, cfg.expert.horizon, period_s)
        for warning in robot_time.configure_warnings:
            self.get_logger().warning(warning)
        if robot_time.rtc.enabled:
            try:
                ms = warm_up_rtc(engine, policy, robot_time.rtc.config, p["instruction"], len(joints.names))
                self.get_logger().info(f"RTC {robot_time.rtc.config.mode} path warmed up ({ms:.0f} ms a chunk)")
            except (ObservationError, PolicyIOError, ValueError) as e:   # an optimisation only:
                self.get_logger().warning(f"RTC warm-up skipped ({e}): the first guided chunks may be late")
        rt = _Runtime(p=p, joints=joints, action_joints=action_joints, policy=policy,
                      model=model, tok=tok, engine=engine,
                      period_s=period_s, cameras=cameras, joint_input=joint_input,
                      monitor=InputMonitor([*cameras, joint_input], p["max_observation_age_s"],
                                           p["input_problem_hold_s"]),
                      stats=LoopStats(), robot_time=robot_time, memory=MemoryLog(p["memory_log_size"]),
                      board=QuestionBoard(self.get_parameter("max_concurrent_questions").value))
        self._rt = rt   # so that _release frees what was created if a later step fails
        memory_qos = qos.latched(p["memory_log_size"] * (p["max_new_tokens"] + 1))
        rt.experts = expert_outputs(p, cfg, 1.0 / robot_time.action_dt, robot_time.rtc.config)
        rt.pubs = {
            **{f"trajectory:{e.name}": self.create_lifecycle_publisher(JointTrajectory, e.topic, qos.CONTROL)
               for e in rt.experts},
            "trajectory": self.create_lifecycle_publisher(JointTrajectory, p["trajectory_topic"], qos.CONTROL),
            "timing": self.create_lifecycle_publisher(FrameTiming, p["frame_timing_topic"], qos.CONTROL),
            "narration": self.create_lifecycle_publisher(TextChunk, p["narration_topic"], qos.TEXT),
            "memory": self.create_lifecycle_publisher(TextChunk, p["memory_topic"], memory_qos),
            "answer": self.create_lifecycle_publisher(TextChunk, p["answer_topic"], qos.TEXT),
        }
        if p["publish_camera_views"]:
            rt.pubs.update({f"view:{c.slot}": self.create_lifecycle_publisher(
                Image, f"~/camera_view/{c.slot}", qos.SENSOR) for c in cameras.values()})
        for name, cam in cameras.items():
            rt.subs.append(self.create_subscription(
                cam.message_type, name, lambda msg, n=name: self._on_image(n, msg), qos.SENSOR,
                callback_group=self._sensor_group))
        rt.subs.append(self.create_subscription(
            JointState, joint_input, self._on_joint_state, qos.SENSOR,
            callback_group=self._sensor_group))
        # /diagnostics reports the lifecycle state too, so it is a plain publisher.
        rt.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.CONTROL)
        # on the steady clock: diagnostics keep coming when sim time stalls or jumps
        rt.timer = self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics,
                                     callback_group=self._diag_group,
                                     clock=Clock(clock_type=ClockType.STEADY_TIME))
        return rt

    @staticmethod
    def _action_joints(p: dict, joints: JointSpace) -> JointSpace:
        """action_joint_names with their limits (given, else the state joints' of the same name)."""
        names = p["action_joint_names"] or list(joints.names)
        if p["action_lower_limits"] or p["action_upper_limits"]:
            return JointSpace.from_lists(names, p["action_lower_limits"], p["action_upper_limits"], "action")
        unknown = [n for n in names if n not in joints.names]
        if unknown:
            raise ValueError(f"action joints {unknown} are not in joint_names: set action_lower_limits "
                             "and action_upper_limits for action_joint_names")
        index = [joints.names.index(n) for n in names]
        return JointSpace.from_lists(names, joints.lower[index], joints.upper[index], "action")

    def on_activate(self, state) -> TransitionCallbackReturn:
        ret = super().on_activate(state)     # enables the lifecycle publishers
        self._stop.clear()
        self._rt.robot_time.activated()      # the first chunk has nothing to continue
        for expert in self._rt.experts:
            expert.rtc.reset()
        self._state = "active"
        self._thread = threading.Thread(target=self._loop, args=(self._rt,), name="oxygen_control",
                                        daemon=True)
        self._thread.start()
        self.get_logger().info(f"active: control loop, replanning {self._rt.robot_time.replanning_text}")
        return ret

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self._state = "inactive"
        self._stop_loop()
        self._rt.board.fail_all("the node was deactivated before the answer was complete")
        self.get_logger().info("inactive: control loop stopped")
        return super().on_deactivate(state)  # disables the lifecycle publishers

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self._release()
        self._state = "unconfigured"
        self.get_logger().info("cleaned up: model and KV pool freed")
        return super().on_cleanup(state)

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        self.close()
        self._state = "finalized"
        self.get_logger().info(f"shut down (from {state.label})")
        return SUCCESS

    def on_error(self, state) -> TransitionCallbackReturn:
        self.get_logger().error(f"error in a transition from {state.label}; freeing everything")
        self.close()
        self._state = "unconfigured"
        return SUCCESS

    def close(self) -> None:
        """Stop the loop, fail waiting questions, free the model and entities (idempotent)."""
        self._stop_loop()
        if self._rt is not None:
            self._rt.board.fail_all("the node is shutting down")
        self._release()

    def autostart(self) -> None:
        self.trigger_configure()
        if self._state == "inactive":
            self.trigger_activate()

    def _stop_loop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30.0)
            if thread.is_alive():
                self.get_logger().error("the control loop did not stop within 30 s")

    def _release(self) -> None:
        rt, self._rt = self._rt, None
        if rt is None:
            return
        if rt.timer is not None:
            self.destroy_timer(rt.timer)
        for sub in rt.subs:
            self.destroy_subscription(sub)
        for pub in rt.pubs.values():
            self.destroy_lifecycle_publisher(pub)
        if rt.diag_pub is not None:
            self.destroy_publisher(rt.diag_pub)
        device = getattr(rt.model, "device", None)
        del rt
        gc.collect()
        if device is not None and device.type == "cuda":
            import torch

            torch.cuda.empty_cache()

    # -- inputs --------------------------------------------------------------------------
    def _arrival(self, stamp) -> tuple[int, float]:
        """(header stamp ns, transport latency s) measured now on the node's clock."""
        stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
        if stamp_ns == 0:
            return 0, 0.0
        return stamp_ns, (self.get_clock().now().nanoseconds - stamp_ns) / 1e9

    def _on_image(self, name: str, msg) -> None:
        """Keep the latest message of a camera (checked, not converted): a camera sends
        more images than frames use, so pixels are converted or decoded once per frame
        (_frame_images)."""
        rt = self._rt
        if rt is None:
            return
        try:
            rt.cameras[name].check(msg)
        except InputError as e:
            self._reject_image(rt, name, e)
            return
        rt.monitor.accept(name, msg, *self._arrival(msg.header.stamp))

    def _reject_image(self, rt: _Runtime, name: str, e: InputError, accepted=None) -> None:
        """Count and log a rejection; `accepted`: the message was accepted before and is
        found bad now (it no longer counts as the camera's latest)."""
        if accepted is None:
            rt.monitor.reject(name, str(e))
        else:
            rt.monitor.discard(name, accepted, str(e))
        self._log(name).warning(f"{name}: image rejected: {e}", throttle_duration_sec=LOG_THROTTLE_S)

    def _frame_images(self, rt: _Runtime, snap) -> dict | None:
        """The frame's camera messages as RGB arrays by model slot (decoded, transformed);
        None if one fails: that message is discarded, so the next frame uses the one before
        it (while fresh) or the next to arrive."""
        images = {}
        for name, cam in rt.cameras.items():
            msg = snap.values[name]
            try:
                images[cam.slot] = cam.rgb(msg)
            except InputError as e:
                self._reject_image(rt, name, e, accepted=msg)
                rt.stats.no_chunk(f"{name}: image rejected: {e}")
                return None
        for slot, rgb in images.items():
            pub = rt.pubs.get(f"view:{slot}")
            if pub is not None:
                pub.publish(rgb_to_image(rgb))
        return images

    def _on_joint_state(self, msg: JointState) -> None:
        rt = self._rt
        if rt is None:
            return
        name = rt.joint_input
        try:
            state = joint_positions(msg, list(rt.joints.names))
        except InputError as e:
            rt.monitor.reject(name, str(e))
            self._log(name).warning(f"{name}: joint state rejected: {e}",
                                    throttle_duration_sec=LOG_THROTTLE_S)
            return
        rt.monitor.accept(name, state, *self._arrival(msg.header.stamp))

    # -- the control loop ------------------------------------------------------------------
    def _loop(self, rt: _Runtime) -> None:
        # replanning "asap": no ticks, the next frame starts when the last one ends
        clock = TickClock(rt.period_s) if rt.robot_time.replanning == "rate" else None
        while clock.wait(self._stop) if clock else not self._stop.is_set():
            start, ran = time.monotonic(), False
            try:
                ran = self._tick(rt)
                if ran:
                    self._check_rate(rt, time.monotonic() - start)
            except Exception as e:  # noqa: BLE001 - a failed frame never ends the loop
                if self._stop.is_set() or not self.context.ok():   # shutting down (Ctrl-C)
                    break
                rt.stats.no_chunk(f"frame failed: {type(e).__name__}: {e}", error=True)
                self._log("control_loop").error(
                    f"frame failed: {type(e).__name__}: {e}\n{traceback.format_exc()}",
                    throttle_duration_sec=LOG_THROTTLE_S)
            if clock is None:
                if not ran:
                    self._stop.wait(0.01)      # no frame ran (inputs not ready): do not spin
                continue
            skipped = clock.advance()
            if skipped:
                rt.stats.skipped(skipped)
                self._log("deadline").warning(
                    f"frame overran the {rt.period_s * 1e3:.0f} ms period: skipped {skipped} tick(s) "
                    f"({rt.stats.skipped_ticks} so far)", throttle_duration_sec=LOG_THROTTLE_S)

    def _check_rate(self, rt: _Runtime, frame_s: float) -> None:
        warning = rt.robot_time.frame_done(frame_s)
        if warning:
            self._log("rate").warning(warning)

    def _tick(self, rt: _Runtime) -> bool:
        """One frame; True when it ran (a chunk was computed), False when inputs stopped it."""
        now = self.get_clock().now()
        tick_mono = time.monotonic()
        back = rt.monitor.note_ros_time(now.nanoseconds)
        if back:
            self._log("clock").warning(
                f"ROS time jumped back by {back:.3f} s; observation ages use the monotonic clock",
                throttle_duration_sec=LOG_THROTTLE_S)
        live = node_params.read(self, node_params.LIVE)
        rt.monitor.max_age_s = live["max_observation_age_s"]
        snap = rt.monitor.snapshot()
        if not snap.usable:
            reason = "; ".join(snap.problems) or "inputs not usable"
            rt.stats.no_chunk(reason)
            self._log("inputs").error(f"no action chunk: {reason}", throttle_duration_sec=LOG_THROTTLE_S)
            return False
        images = self._frame_images(rt, snap)
        if images is None:
            return False
        state = snap.values[rt.joint_input]
        try:
            obs = rt.policy.observation(images, state, live["instruction"], snap.stamp_ns / 1e9)
        except PolicyIOError as e:
            rt.stats.no_chunk(f"observation rejected by the policy I/O: {e}", error=True)
            self._log("observation").error(f"no action chunk: observation rejected by the policy I/O: {e}",
                                           throttle_duration_sec=LOG_THROTTLE_S)
            return False
        self._submit_requests(rt, live)
        obs_stamp_ns = snap.stamp_ns or now.nanoseconds       # unstamped inputs: the tick's time
        guide, note = rt.robot_time.rtc_guide(obs_stamp_ns / 1e9, state)
        if note:
            self._log("rtc").info(note, throttle_duration_sec=LOG_THROTTLE_S)
        # each further expert continues its own previous chunk (notes: the first expert's say it)
        expert_guides = {e.name: e.rtc.guide(obs_stamp_ns / 1e9, state)[0] for e in rt.experts}
        try:
            chunk = rt.engine.act(obs, rtc=guide, expert_rtc=expert_guides)
        except (ObservationError, ValueError) as e:
            rt.stats.no_chunk(f"observation rejected by the model: {e}", error=True)
            self._log("observation").error(f"no action chunk: observation rejected by the model: {e}",
                                           throttle_duration_sec=LOG_THROTTLE_S)
            return False
        acted = time.perf_counter()
        try:
            sent = self._publish_chunk(rt, chunk, state, now, tick_mono, obs_stamp_ns, live)
            # on the engine's frame clock (as total_ms): when the chunk was ready + publishing it
            sent["chunk_ms"] = chunk.timings_ms["chunk"] + (time.perf_counter() - acted) * 1e3
        finally:
            result = rt.engine.talk()      # language only after the chunk is out (and always:
        self._publish_frame(rt, result, obs_stamp_ns, sent)   # it closes the engine's frame)
        return True

    def _submit_requests(self, rt: _Runtime, live: dict) -> None:
        engine = rt.engine
        cap = engine.config.max_new_tokens
        for q in rt.board.take():          # questions first: they have a caller waiting
            try:
                rt.board.submitted(q, engine.submit(LanguageRequest(q.prompt, "answer", q.max_new_tokens)))
            except RequestRejected as e:
                rt.board.fail(q, f"the engine rejected the question: {e}")
        for stream in ("narration", "memory"):
            every = live[f"{stream}_every_n_frames"]
            if not every or engine.frame_index % every:
                continue
            if rt.stream_live[stream] is not None:   # the previous one is still decoding
                rt.skipped_requests[stream] += 1
                continue
            req = LanguageRequest(live[f"{stream}_prompt"], stream, min(live[f"{stream}_max_tokens"], cap))
            try:
                rt.stream_live[stream] = engine.submit(req)
            except RequestRejected as e:
                rt.skipped_requests[stream] += 1
                self._log(stream).warning(f"{stream} request skipped: {e}", throttle_duration_sec=LOG_THROTTLE_S)

    def _publish_chunk(self, rt: _Runtime, chunk, state, tick_now, tick_mono: float, obs_stamp_ns: int,
                       live: dict) -> dict:
        """Publish the action chunk now, stamped at its observation's time; returns the
        figures FrameTiming carries."""
        actions = rt.policy.actions(chunk.actions, state)[: live["chunk_points"] or None]
        positions, clipped = rt.action_joints.clip(actions)
        if clipped:
            rt.clipped_points += clipped
            self._log("envelope").warning(
                f"{clipped} of {len(positions)} chunk points clipped into the joint limits "
                f"({rt.clipped_points} so far)", throttle_duration_sec=LOG_THROTTLE_S)
        rtime = rt.robot_time
        publish_now = self.get_clock().now()
        obs_s, restamped = rtime.observation_time(obs_stamp_ns / 1e9, tick_now.nanoseconds / 1e9,
                                                  publish_now.nanoseconds / 1e9, time.monotonic() - tick_mono)
        if restamped:       # the ROS clock jumped, or the stamp is not on the node's clock
            self._log("clock").warning(restamped, throttle_duration_sec=LOG_THROTTLE_S)
        planned = plan_chunk(positions, obs_s, rtime.action_dt, publish_now.nanoseconds / 1e9,
                             live["trajectory_velocities"])
        expired = rtime.chunk_sent(planned, positions, publish_now.nanoseconds / 1e9 - obs_s)
        if expired:
            self._log("latency").error(expired, throttle_duration_sec=LOG_THROTTLE_S)
        else:
            rt.pubs["trajectory"].publish(trajectory_msg(rt.action_joints.names, planned,
                                                         None if restamped else obs_stamp_ns))
        for expert in rt.experts:       # the further experts' chunks, from the same observation
            positions, clipped = expert_positions(expert, chunk.expert_actions[expert.name])
            rt.clipped_points += clipped
            now_s = self.get_clock().now().nanoseconds / 1e9
            own = plan_chunk(positions, obs_s, expert.action_dt, now_s, live["trajectory_velocities"])
            if not own.empty:
                rt.pubs[f"trajectory:{expert.name}"].publish(
                    trajectory_msg(expert.joints.names, own, None if restamped else obs_stamp_ns))
                expert.rtc.published(own.stamp_s, positions, max(0.0, now_s - obs_s))
        return {"chunk_latency_ms": (publish_now.nanoseconds / 1e9 - obs_s) * 1e3,
                "points_dropped": planned.dropped, "rtc_delay_steps": rtime.rtc.last_delay}

    def _publish_frame(self, rt: _Runtime, result, obs_stamp_ns: int, sent: dict) -> None:
        ms = result.timings_ms
        missed = ms["total"] > rt.period_s * 1e3
        timing = frame_timing_msg(result, obs_stamp_ns, rt.period_s, **sent)
        timing.header.stamp = self.get_clock().now().to_msg()
        rt.pubs["timing"].publish(timing)

        for d in merge_deltas(result.deltas):
            pub = rt.pubs.get(d.stream)
            if pub is not None:
                pub.publish(text_chunk_msg(d, timing.header.stamp))
            if d.done:
                self._finished(rt, d)

        budget = rt.engine.config.steps_per_frame
        rt.stats.frame(ms["total"], missed, result.tokens_emitted, decode_steps=result.decode_steps,
                       decode_budget=budget if budget else f"auto ({result.decode_steps})",
                       live_requests=result.live_requests, queued_requests=result.queued_requests,
                       kv_bytes_in_use=result.kv_bytes_in_use)

    def _finished(self, rt: _Runtime, d) -> None:
        if d.error:
            self._log(d.stream).warning(f"{d.stream} request {d.request_id} failed: {d.error}",
                                        throttle_duration_sec=LOG_THROTTLE_S)
        if rt.stream_live.get(d.stream) == d.request_id:
            rt.stream_live[d.stream] = None
        if d.stream == "memory" and not d.error:
            rt.memory.add(d.full_text)
        elif d.stream == "answer":
            rt.board.finish(d.request_id, d.full_text, d.error)

    # -- the progress service --------------------------------------------------------------
    def _on_ask(self, request, response):
        t0 = time.monotonic()

        def reply(answer: str = "", error: str = ""):
            response.success, response.answer, response.error = not error, answer, error
            response.latency_s = time.monotonic() - t0
            if error:
                self._log("ask_progress").warning(f"ask_progress: {error}", throttle_duration_sec=0.5)
            return response

        question = " ".join(request.question.split())
        if not question:
            return reply(error="empty question")
        rt = self._rt
        if rt is None or self._state != "active":
            return reply(error=f"the node is {self._state}, not active: activate it to ask questions")
        limit = rt.model.cfg.max_prompt_tokens
        if len(question) > 16 * limit:
            return reply(error=f"question too long: {len(question)} characters")
        p = node_params.read(self, ["answer_prompt", "answer_max_tokens", "question_timeout_s"])
        try:
            prompt = rt.memory.answer_prompt(p["answer_prompt"], question,
                                             lambda s: len(rt.tok.encode(s)), limit)
            q = rt.board.open(prompt, min(p["answer_max_tokens"], rt.engine.config.max_new_tokens))
        except (PromptTooLong, QuestionRejected) as e:
            return reply(error=str(e))
        if self._state != "active":          # deactivated meanwhile: nobody would answer
            rt.board.fail(q, f"the node is {self._state}, not active: activate it to ask questions")
        timeout = request.timeout_s if request.timeout_s > 0 else p["question_timeout_s"]
        if not q.event.wait(timeout):
            reason, at = rt.stats.problem
            why = f"; frames are not running: {reason}" if reason and time.monotonic() - at < 2.0 else ""
            where = ("it was not started" if rt.board.withdraw(q)
                     else f"request {q.request_id} keeps streaming on the answer topic")
            return reply(error=f"timed out after {timeout:g} s waiting for the answer ({where}){why}")
        if q.error:
            return reply(error=q.error)
        return reply(answer=q.answer)

    # -- diagnostics ---------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        rt = self._rt
        if rt is None:
            return
        engine = rt.engine
        language = {
            "live_requests": rt.stats.last.get("live_requests", 0),
            "queued_requests": rt.stats.last.get("queued_requests", 0),
            "kv_bytes_in_use": rt.stats.last.get("kv_bytes_in_use", 0),
            "kv_bytes_total": engine.pool.bytes_total,
            "questions_in_flight": rt.board.in_flight(),
            "questions_answered": rt.board.answered,
            "questions_failed": rt.board.failed,
            "memory_entries": len(rt.memory),
            "narrations_skipped": rt.skipped_requests["narration"],
            "memory_requests_skipped": rt.skipped_requests["memory"],
            "clock_jumps": rt.monitor.clock_jumps,
        }
        robot_time = rt.robot_time.diagnostics()
        if rt.robot_time.rtc.enabled:
            for e in rt.experts:        # each further expert's own RTC planner
                robot_time["values"].update({f"rtc_delay_steps:{e.name}": e.rtc.last_delay,
                                             f"rtc_plain_chunks:{e.name}": e.rtc.plain_chunks,
                                             f"rtc_delays_clamped:{e.name}": e.rtc.clamped})
        arr = diagnostics.build(
            self.get_fully_qualified_name(), self.get_clock().now().to_msg(), self._state,
            rt.p["model"], {**rt.stats.snapshot(), "clipped_points": rt.clipped_points},
            rt.monitor.snapshot(), rt.monitor.counts(), language, rt.period_s, robot_time)
        rt.diag_pub.publish(arr)


# The executor's Python work (wait sets, callbacks) and the inference thread share the
# GIL. The inference thread releases it around every torch op, and with the default
# 5 ms switch interval each release can cost it up to 5 ms (hundreds per frame).
GIL_SWITCH_INTERVAL_S = 0.0002


def spin(executor: MultiThreadedExecutor) -> None:
    """executor.spin(), surviving rclpy's race between a transition that destroys
    entities (cleanup runs in a worker thread) and the executor thread building its wait
    set from them: that spin raises InvalidHandle, and the next one rebuilds the set.
    A signal that shuts the context down while the wait set is being built makes rclpy
    raise RCLError ("context is not valid") instead of ExternalShutdownException: a
    shutdown all the same (it made SIGTERM exit 1 about one time in three)."""
    while executor.context.ok():
        try:
            executor.spin_once(timeout_sec=0.5)
        except _rclpy.InvalidHandle:
            continue
        except _rclpy.RCLError:
            if executor.context.ok():
                raise


def main(argv=None) -> int:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    rclpy.init(args=sys.argv if argv is None else argv)
    node = None
    try:
        node = OxygenNode()
        executor = MultiThreadedExecutor(num_threads=node.executor_threads)
        executor.add_node(node)
        if node.get_parameter("autostart").value:
            node.autostart()
        spin(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.close()
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
