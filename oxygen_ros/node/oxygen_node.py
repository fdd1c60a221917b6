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

Fleet mode (`robots: [arm1, arm2, ...]`): one node and one model serve several robots,
each under its own namespace (/arm1/joint_states, /arm1/joint_trajectory, /arm1/ask_progress,
...) with its own instruction, joints, policy I/O, RTC state, memory and questions; a
parameter set as `arm1.NAME` overrides the shared NAME for that robot (params.PER_ROBOT).
Each tick is one frame for all of them (engine/fleet.py): one batched prefill and action
sampling over the robots whose inputs are usable, then one decode batch. One parameter
of the same executable rather than a second one: the lifecycle, the services, the
diagnostics and the launch files stay one, and a single robot is a fleet of one.

This module keeps the lifecycle and builds what configure makes (runtime.py: Serving, a
Runtime per robot); each part gets what it uses, never the node:
  frame_loop.py        the inference thread: one frame per tick (runtime.NodeDoors)
  frame_publisher.py   a frame's action chunks, FrameTiming and text (its publishers, clock, logger)
  sensor_inputs.py     a robot's camera and joint-state inputs (its subscriptions bind to it)
  question_service.py  a robot's ask_progress (its RobotLanguage and the lifecycle state, by getter)
  diagnostics.py       /diagnostics on its timer (asks each part for its figures)
"""
from __future__ import annotations

import array
import faulthandler
import gc
import signal
import sys
import threading
import time
import traceback
import weakref
from functools import partial

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from oxygen_msgs.msg import FrameTiming, TextChunk
from oxygen_msgs.srv import AskProgress
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState
from trajectory_msgs.msg import JointTrajectory

from ..engine.observation.observation import ObservationError
from ..engine.policy_io import PolicyIOError
from . import malloc_arenas, memory_trace, qos
from . import params as node_params
from .cameras import Camera, per_camera, transport_of
from .convert import decoder
from .executor_spin import GIL_SWITCH_INTERVAL_S, spin
from .diagnostics import Diagnostics
from .expert_outputs import expert_outputs
from .frame_loop import FrameLoop
from .input_monitor import InputMonitor
from .joint_space import JointSpace
from .logs import ChildLoggers
from ..fast_exit import exit_now
from .loop_stats import LoopStats
from ..engine.robot_language import RobotLanguage
from .question_service import QuestionService
from .recorder_wait import missing_recorders
from .topic_names import robot_topic
from .robot_time import RobotTime, check_rtc_mode, warm_up_rtc
from .runtime import NodeDoors, Runtime, Serving
from .sensor_inputs import SensorInputs

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class OxygenNode(LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("oxygen_node", **kwargs)
        self._param_problems = {}
        for problem in node_params.declare_parameters(self):
            name = problem.split(":")[0].removeprefix("parameter ")
            self._param_problems[name] = problem
            self.get_logger().error(f"{problem} (the default is kept; configure will fail)")
        self._changeable, self._started = None, False      # set at the end of __init__
        self.add_on_set_parameters_callback(self._check_parameters)
        self._sensor_group = ReentrantCallbackGroup()
        self._service_group = ReentrantCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self.log_for = ChildLoggers(self.get_logger())
        self._state = "unconfigured"
        self._serving: Serving | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.robots = node_params.read(self, ["robots"])["robots"]     # [] : one robot, the node's own
        try:
            node_params.check_robot_names(self.robots)
        except ValueError as e:
            self._param_problems["robots"] = f"parameter robots: {e}"
            self.get_logger().error(f"{e} (configure will fail)")
            self.robots = []
        for problem in node_params.declare_robot_parameters(self, self.robots):
            self._param_problems[problem.split(":")[0].removeprefix("parameter ")] = problem
            self.get_logger().error(f"{problem} (the shared value is used; configure will fail)")
        # one ask_progress per robot: the node's own, or /ROBOT/ask_progress in a fleet
        for robot, name in ([(r, f"/{r}/ask_progress") for r in self.robots] or [("", "~/ask_progress")]):
            service = QuestionService(partial(self.language_of, robot), lambda: self._state,
                                      partial(node_params.read, self, robot=robot),
                                      self.log_for("ask_progress", robot))
            self.create_service(AskProgress, name, service, qos_profile=qos.SERVICES,
                                callback_group=self._service_group)
        # Ctrl-C / SIGTERM shut the context down: stop the control loop before it publishes
        self.context.on_shutdown(self._stop.set)
        # the robot's allow-list; None: every parameter may change under its own rule
        changeable = node_params.read(self, ["changeable_parameters"])["changeable_parameters"]
        self._changeable = set(changeable) if changeable else None
        unknown = node_params.unknown_names(changeable, self.robots)
        if unknown:
            self._param_problems["changeable_parameters"] = (
                f"parameter changeable_parameters: unknown parameters {unknown}")
            self.get_logger().error(f"changeable_parameters names unknown parameters {unknown} (configure will fail)")
        self._started = True

    @property
    def executor_threads(self) -> int:
        # sensor callbacks, transitions, diagnostics, plus one per waiting question
        return 4 + max(1, len(self.robots)) * self.get_parameter("max_concurrent_questions").value

    @property
    def runtime(self) -> Runtime | None:
        """The (first) robot's part of what configure built; None while unconfigured."""
        return next(iter(self._serving.robots.values()), None) if self._serving else None

    def language_of(self, robot: str) -> RobotLanguage | None:
        """A robot's language (its questions' door); None while unconfigured (callbacks may still run then)."""
        serving = self._serving            # once: cleanup may clear it meanwhile
        rt = serving.robots.get(robot) if serving else None
        return rt.language if rt else None

    @property
    def serving(self) -> Serving | None:
        return self._serving

    @property
    def lifecycle_state(self) -> str:
        """unconfigured, inactive, active or finalized, as questions and diagnostics report it."""
        return self._state

    # -- parameters ----------------------------------------------------------------------
    def _check_parameters(self, params) -> SetParametersResult:
        try:
            reason = self._refusal(params)
        except Exception as e:  # noqa: BLE001 - a set request is answered whatever it holds
            reason = f"refused: {type(e).__name__}: {e}"
        if reason:
            self.get_logger().warning(f"parameter change refused: {reason}", throttle_duration_sec=1.0)
            return SetParametersResult(successful=False, reason=reason)
        for p in params:
            self._param_problems.pop(p.name, None)
            if self._started:           # who changed what the robot does: in the log
                old = self.get_parameter_or(p.name, None)   # unset ones have no value to get
                old = "(unset)" if old is None or old.type_ == Parameter.Type.NOT_SET else _short(old.value)
                self.get_logger().info(f"parameter {p.name} changed: {old} -> {_short(p.value)}")
        return SetParametersResult(successful=True)

    def _refusal(self, params) -> str:
        """Why a set request is refused ("" if it is not): outside the robot's allow-list,
        applied at configure while configured, or a value no frame may use."""
        if self._started and self._changeable is not None:
            refused = [p.name for p in params if not node_params.changeable(p.name, self._changeable)]
            if refused:
                return (f"{', '.join(refused)} not in changeable_parameters (the deployment profile's "
                        "allow-list): change the params file and restart the node")
        frozen = [p.name for p in params if node_params.applies_at(p.name) == "configure"]
        if frozen and self._serving is not None:
            return f"{', '.join(frozen)} apply at configure: cleanup the node, set, configure again"
        problems = [problem for p in params if (problem := node_params.value_problem(p.name, p.value))]
        return "; ".join(problems)

    # -- lifecycle -----------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        t0 = time.monotonic()
        try:
            if self._param_problems:
                raise ValueError("; ".join(self._param_problems.values()))
            self._serving = self._configure()
        except Exception as e:  # noqa: BLE001 - every failure becomes a FAILURE with its reason
            self.get_logger().error(f"configure failed: {type(e).__name__}: {e}")
            self._release()
            return FAILURE
        self._state = "inactive"
        serving = self._serving
        head = (f"configured in {time.monotonic() - t0:.1f} s: model {self.get_parameter('model').value}, "
                f"KV pool {serving.engine.pool.bytes_total / 2**20:.1f} MiB")
        lines = [f"{self._robot_label(rt.name)}{len(rt.cameras)} camera(s) -> "
                 f"{[f'{c.slot} ({c.transport})' for c in rt.cameras.values()]}, "
                 f"{len(rt.joints.names)} joints, replanning {rt.robot_time.replanning_text}, actions at "
                 f"{rt.robot_time.action_rate_hz:g} Hz ({rt.robot_time.action_rate_source}), RTC "
                 f"{rt.robot_time.rtc.config.mode}, policy I/O {rt.policy.convention} "
                 f"({rt.policy.action_dims} action dims -> {list(rt.action_joints.names)})"
                 for rt in serving.robots.values()]
        if self.robots:                # a line per robot
            for line in [f"{head}, fleet of {len(serving.robots)} robots", *lines]:
                self.get_logger().info(line)
        else:
            self.get_logger().info(f"{head}, {lines[0]}")
        return super().on_configure(state)

    @staticmethod
    def _robot_label(robot: str) -> str:
        return f"robot {robot}: " if robot else ""

    def _configure(self) -> Serving:
        from ..engine.fleet import FleetOfOne
        from ..engine.factory import build_engine

        shared = node_params.read(self)
        per_robot = {r: node_params.read(self, robot=r) for r in self.robots}
        robots = per_robot or {"": shared}
        # the robots' joints first: a wrong joint list fails before the model is loaded
        joints = {robot: self._for_robot(robot, self._joint_spaces, p) for robot, p in robots.items()}
        model, tok, engine = build_engine(shared, per_robot or None)
        period_s = 1.0 / shared["control_rate_hz"]
        self._serving = serving = Serving(
            model=model, tok=tok, engine=engine, frames=engine if self.robots else FleetOfOne(engine),
            period_s=period_s)   # set now, so that _release frees what was made if a later step fails
        for robot, p in robots.items():
            self._for_robot(robot, self._configure_robot, robot, p, *joints[robot], model, tok,
                            engine.view(robot) if robot else engine, period_s)
        # /diagnostics reports the lifecycle state too, so it is a plain publisher.
        serving.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.CONTROL)
        # on the steady clock: diagnostics keep coming when sim time stalls or jumps
        diagnostics = Diagnostics(lambda: self._serving, self.get_fully_qualified_name(), self.get_clock(),
                                  lambda: self._state)
        serving.timer = self.create_timer(shared["diagnostics_period_s"], diagnostics,
                                          callback_group=self._diag_group,
                                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        return serving

    def _topic(self, robot: str, topic: str) -> str:
        """A parameter's topic name, resolved: the node's way for its own robot; a fleet
        robot's relative names live under /ROBOT/ (private ones under /ROBOT/NODE/)."""
        if not robot:
            return self.resolve_topic_name(topic)
        return robot_topic(robot, self.get_name(), topic)

    @staticmethod
    def _for_robot(robot: str, step, *args):
        """step(*args), its failure said with a fleet robot's name."""
        try:
            return step(*args)
        except Exception as e:  # noqa: BLE001 - re-raised with the robot's name
            if not robot:
                raise
            raise ValueError(f"robot {robot}: {type(e).__name__}: {e}") from e

    def _joint_spaces(self, p: dict) -> tuple[JointSpace, JointSpace]:
        """(state joints, action joints) from a robot's parameters; ValueError if they are wrong."""
        joints = JointSpace.from_lists(p["joint_names"], p["joint_lower_limits"], p["joint_upper_limits"])
        return joints, self._action_joints(p, joints)

    def _configure_robot(self, robot: str, p: dict, joints: JointSpace, action_joints: JointSpace, model, tok,
                         engine, period_s: float) -> Runtime:
        from ..engine.factory import build_policy_io

        topics = p["camera_topics"]
        if len(set(topics)) != len(topics):
            raise ValueError(f"camera_topics has duplicates: {topics}")
        cfg = model.cfg
        if len(topics) > len(cfg.camera_slots):
            raise ValueError(f"{len(topics)} camera_topics but model {cfg.name} has "
                             f"{len(cfg.camera_slots)} camera slots {list(cfg.camera_slots)}")
        policy = build_policy_io(p, model, tok, joints, action_joints)
        resolve = partial(self._topic, robot)
        cameras = {resolve(t): Camera(resolve(t), slot, transport_of(t, transport), view)
                   for t, slot, (transport, view) in zip(topics, cfg.camera_slots, per_camera(p, len(topics)))}
        if any(c.transport == "compressed" for c in cameras.values()):
            self.get_logger().info(f"{self._robot_label(robot)}compressed cameras decoded with {decoder()[0]}")
        joint_input = resolve(p["joint_state_topic"])
        check_rtc_mode(p["rtc_mode"], cfg)
        robot_time = RobotTime.from_params(p, policy, cfg.expert.horizon, period_s)
        for warning in robot_time.configure_warnings:
            self.get_logger().warning(f"{self._robot_label(robot)}{warning}")
        if robot_time.rtc.enabled and not robot:      # a fleet's guided robots sample one by one
            try:
                ms = warm_up_rtc(engine, policy, robot_time.rtc.config, p["instruction"], len(joints.names))
                self.get_logger().info(f"RTC {robot_time.rtc.config.mode} path warmed up ({ms:.0f} ms a chunk)")
            except (ObservationError, PolicyIOError, ValueError) as e:   # an optimisation only:
                self.get_logger().warning(f"RTC warm-up skipped ({e}): the first guided chunks may be late")
        # the published envelope: action limits narrowed to the joint limits, whatever is set
        rt = Runtime(name=robot, p=p, joints=joints, action_joints=action_joints.inside(joints), policy=policy,
                     model=model, tok=tok, engine=engine,
                     period_s=period_s, cameras=cameras,
                     monitor=(monitor := InputMonitor([*cameras, joint_input], p["max_observation_age_s"],
                                                      p["input_problem_hold_s"])),
                     stats=(stats := LoopStats(monitor.unusable)), robot_time=robot_time,
                     language=RobotLanguage(engine, cfg.max_prompt_tokens, p["memory_log_size"],
                                            self.get_parameter("max_concurrent_questions").value, period_s,
                                            stalled=stats.stalled))
        self._serving.robots[robot] = rt   # so that _release frees what was created if a later step fails
        memory_qos = qos.latched(p["memory_log_size"] * (p["max_new_tokens"] + 1))
        rt.experts = expert_outputs(p, cfg, 1.0 / robot_time.action_dt, robot_time.rtc.config, joints)
        publisher = self.create_lifecycle_publisher
        rt.pubs = {
            **{f"trajectory:{e.name}": publisher(JointTrajectory, resolve(e.topic), qos.CONTROL)
               for e in rt.experts},
            "trajectory": publisher(JointTrajectory, resolve(p["trajectory_topic"]), qos.CONTROL),
            "timing": publisher(FrameTiming, resolve(p["frame_timing_topic"]), qos.CONTROL),
            "narration": publisher(TextChunk, resolve(p["narration_topic"]), qos.TEXT),
            "memory": publisher(TextChunk, resolve(p["memory_topic"]), memory_qos),
            "answer": publisher(TextChunk, resolve(p["answer_topic"]), qos.TEXT),
        }
        if p["publish_camera_views"]:
            rt.pubs.update({f"view:{c.slot}": publisher(Image, resolve(f"~/camera_view/{c.slot}"), qos.SENSOR)
                            for c in cameras.values()})
        # the subscriptions bind to the robot's inputs, not to the node: no lookup per message
        rt.inputs = inputs = SensorInputs(cameras, joint_input, joints.names, rt.monitor, rt.stats, self.get_clock(),
                                          self.log_for, {c.slot: rt.pubs[f"view:{c.slot}"] for c in cameras.values()
                                                         if f"view:{c.slot}" in rt.pubs})
        for name, cam in cameras.items():
            rt.subs.append(self.create_subscription(
                cam.message_type, name, partial(inputs.on_image, name), qos.SENSOR, callback_group=self._sensor_group))
        rt.subs.append(self.create_subscription(
            JointState, joint_input, inputs.on_joint_state, qos.SENSOR, callback_group=self._sensor_group))
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
        for rt in self._serving.robots.values():
            rt.robot_time.activated()        # the first chunk has nothing to continue
            for expert in rt.experts:
                expert.rtc.reset()
        self._state = "active"
        doors = NodeDoors(clock=self.get_clock(), log_for=self.log_for,
                          read=lambda names, robot: node_params.read(self, names, robot=robot),
                          running=self.context.ok, missing_recorders=partial(missing_recorders, self))
        self._thread = threading.Thread(target=FrameLoop(self._serving, self._stop, doors).run,
                                        name="oxygen_control", daemon=True)
        self._thread.start()
        replanning = next(iter(self._serving.robots.values())).robot_time.replanning_text
        self.get_logger().info(f"active: control loop, replanning {replanning}")
        return ret

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self._state = "inactive"
        self._stop_loop()
        for rt in self._serving.robots.values():
            rt.language.fail_questions("the node was deactivated before the answer was complete")
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

    def close(self, join_s: float = 30.0) -> bool:
        """Stop the loop, fail waiting questions, free the model and entities (idempotent).
        False when the loop was still mid-frame after `join_s`: then nothing is freed (the
        frame holds it), which only a process about to exit may accept."""
        stopped = self._stop_loop(join_s)
        serving = self._serving
        for rt in serving.robots.values() if serving else ():
            rt.language.fail_questions("the node is shutting down")
        if stopped:
            self._release()
        return stopped

    def autostart(self) -> None:
        self.trigger_configure()
        if self._state == "inactive":
            self.trigger_activate()

    def _stop_loop(self, join_s: float = 30.0) -> bool:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=join_s)
            if thread.is_alive():
                self.get_logger().warning(f"the control loop is still mid-frame after {join_s:g} s")
                return False
        return True

    def _release(self) -> None:
        serving, self._serving = self._serving, None
        if serving is None:
            return
        if serving.timer is not None:
            self.destroy_timer(serving.timer)
        for rt in serving.robots.values():
            if rt.inputs is not None:
                rt.inputs.close()
            for sub in rt.subs:
                self.destroy_subscription(sub)
            for pub in rt.pubs.values():
                self.destroy_lifecycle_publisher(pub)
        if serving.diag_pub is not None:
            self.destroy_publisher(serving.diag_pub)
        device = getattr(serving.model, "device", None)
        alive = weakref.ref(serving.model)
        rt = serving = None       # the loop's last robot too: it holds the model
        gc.collect()
        # A callback that took a robot's runtime just before (diagnostics, a sensor message) may hold
        # it a moment longer: trim once it is gone, collecting garbage meanwhile (waiting alone
        # sometimes left the model resident into the next cycle: docs/node.md, lifecycle cycles).
        end = time.monotonic() + 1.0
        while alive() is not None and time.monotonic() < end:
            time.sleep(0.01)
            gc.collect()
        malloc_arenas.trim()
        if device is not None and device.type == "cuda":
            import torch

            torch.cuda.empty_cache()


def _short(value, limit: int = 200) -> str:
    """A parameter value for a log line, cut to `limit` characters."""
    text = repr(list(value) if isinstance(value, array.array) else value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# On a signal, the frame in progress gets this long to finish; then the process ends
# without it (nothing it would still publish matters once the node is going away).
STOP_JOIN_S = 1.0


def main(argv=None) -> int:
    """Run the node until a signal or a shutdown transition; exits the process (0, or 1 on
    an error, whose traceback is printed)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: where a stuck node is stuck
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    malloc_arenas.limit()         # before rclpy and torch start their threads
    memory_trace.start_from_env()
    rclpy.init(args=sys.argv if argv is None else argv)
    node, code = None, 0
    try:
        node = OxygenNode()
        executor = MultiThreadedExecutor(num_threads=node.executor_threads)
        executor.add_node(node)
        if node.get_parameter("autostart").value:
            node.autostart()
        spin(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:  # noqa: BLE001 - reported, then the same fast exit with status 1
        traceback.print_exc()
        code = 1
    finally:
        if node is None or node.close(STOP_JOIN_S):
            if node is not None:
                node.destroy_node()
            rclpy.try_shutdown()
    exit_now(code)      # the interpreter's teardown would add a second or more


if __name__ == "__main__":
    sys.exit(main())
