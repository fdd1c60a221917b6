"""What on_configure builds (a Runtime per robot, one Serving for them all) and the doors the
node lends its parts (NodeDoors) instead of itself.

A leaf of the node: its parts (frame loop, frame publisher, sensor inputs, question
service, diagnostics) import this module, and nothing here imports them or the node.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..engine.robot_language import RobotLanguage
from .input_monitor import InputMonitor
from .joint_space import JointSpace
from .loop_stats import LoopStats
from .robot_time import RobotTime


@dataclass
class Runtime:
    """One robot's part of what on_configure creates and on_cleanup frees."""
    name: str                          # the robot: "" for the node's own namespace, else a fleet's
    p: dict
    joints: JointSpace                 # the state's joints (read from joint states)
    action_joints: JointSpace          # the joints the action dimensions drive; limits: the published envelope (action limits inside the joint limits)
    policy: object                     # engine.policy_io LimitsIO | PolicyIO
    model: object
    tok: object
    engine: object                     # OxygenEngine, or a fleet robot's RobotView of the FleetEngine
    period_s: float
    cameras: dict                      # input name (resolved topic) -> Camera (slot, transport, view)
    monitor: InputMonitor
    stats: LoopStats
    robot_time: RobotTime              # action rate, chunk stamping, RTC, rate check
    language: RobotLanguage            # streams, memory log, questions and their estimate
    inputs: object = None              # sensor_inputs.SensorInputs: the subscriptions' latest messages
    pubs: dict = field(default_factory=dict)
    subs: list = field(default_factory=list)
    experts: list = field(default_factory=list)   # node/expert_outputs.ExpertOutput per further expert


@dataclass
class Serving:
    """What on_configure creates once for all the robots the node serves."""
    model: object
    tok: object
    engine: object                     # OxygenEngine (one robot) or FleetEngine
    frames: object                     # the frame API the loop drives: FleetEngine, or FleetOfOne
    period_s: float
    robots: dict = field(default_factory=dict)    # name -> Runtime, in the order of `robots`
    timer: object = None
    diag_pub: object = None


@dataclass(frozen=True)
class NodeDoors:
    """What the frame loop may use of the node: each a narrow capability, not the node."""
    clock: object                                  # the node's rclpy Clock (ROS time, sim time when set)
    log_for: Callable                              # logs.ChildLoggers: (topic, robot) -> child logger
    read: Callable                                 # (names, robot) -> parameter values now
    running: Callable[[], bool]                    # False once the context is shutting down
    missing_recorders: Callable[[object], dict]    # robots -> awaited recorders not subscribed yet
