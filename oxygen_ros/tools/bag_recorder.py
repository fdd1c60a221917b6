"""Record oxygen_node's outputs into a rosbag2 bag (MCAP or sqlite3) without `ros2 bag`.

Raw rclpy subscriptions (raw=True: the CDR bytes, no deserialisation) feed a rosbags
Writer, so recording keeps up with the control rate and the bag is exactly what
`ros2 bag record` would write: metadata.yaml, one storage file, message definitions
(oxygen_msgs included, from bag_types). Subscriptions use the node's QoS: reliable,
and transient-local for memory so that entries published before the recorder started
are recorded too. Receive times (the recorder's ROS clock) are the bag timestamps.

With `cameras`, the robot's inputs too, so that `oxygen play` can feed them to a node later:
joint states (every message) and each camera as sensor_msgs/CompressedImage at most
`camera_hz` per camera. A compressed camera is written as it arrives; a raw one is
encoded to JPEG once per recorded frame and written on <topic>/compressed (image_transport's
name), so a node replaying the bag takes that topic (10x-50x smaller than raw frames).

A multi-expert model's further experts each publish a JointTrajectory on their own topic
(node/expert_outputs.py); those are recorded too (expert_topics), and the bag's custom data
names the first expert's topic and theirs, so the summary tells them apart.

/parameter_events too (every node's accepted parameter changes, rclpy's QoS for it: reliable,
volatile, keep-last 1000), so the report lists who changed what the robot does
(tools/bag_parameters.py); the bag's custom data names the recorder's own node, whose events
are not the robot's.

`tf` too (/tf in the root namespace): the sim's ground truth (cube, bowl and gripper poses,
tools/sim_robot.py), which `oxygen report` scores (tools/bag_task.py). It is the robot's,
not the node's: a run without the sim has none, and nothing waits for it.

The same topics with `ros2 bag record` (see RECORDED and ros2_bag_command):
    ros2 bag record -s mcap /joint_trajectory /frame_timing /narration /memory /answer /diagnostics /parameter_events /tf
"""
from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import bag_types
from .bag_parameters import PARAMETER_EVENT, PARAMETER_EVENTS


@dataclass(frozen=True)
class Topic:
    key: str          # the node's parameter naming it ("" for fixed names)
    name: str         # default name; relative names follow the namespace
    msgtype: str      # rosbag2 type name, e.g. trajectory_msgs/msg/JointTrajectory
    latched: bool = False   # transient-local (the node publishes memory so)


TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
TF = "tf2_msgs/msg/TFMessage"
GROUND_TRUTH = "tf"          # relative: /tf, or <namespace>/tf for a namespaced robot
RECORDED = [
    Topic("trajectory_topic", "joint_trajectory", TRAJECTORY),
    Topic("frame_timing_topic", "frame_timing", "oxygen_msgs/msg/FrameTiming"),
    Topic("narration_topic", "narration", "oxygen_msgs/msg/TextChunk"),
    Topic("memory_topic", "memory", "oxygen_msgs/msg/TextChunk", latched=True),
    Topic("answer_topic", "answer", "oxygen_msgs/msg/TextChunk"),
    Topic("", "/diagnostics", "diagnostic_msgs/msg/DiagnosticArray"),
    Topic("", PARAMETER_EVENTS, PARAMETER_EVENT),     # every node's; the summary skips the recorder's own
    Topic("", GROUND_TRUTH, TF),                       # the sim's, when there is one
]
DEPTH = 1000   # keep-last depth of each subscription: a long stall still loses nothing
# the bag's custom data keys naming the trajectory topics (tools/bag_read.py reads them)
TRAJECTORY_KEY = "oxygen.trajectory_topic"
EXPERT_TRAJECTORIES_KEY = "oxygen.expert_trajectory_topics"    # comma-separated
RECORDER_NODE_KEY = "oxygen.recorder_node"    # the recorder's own node (its parameter events are not the robot's)


def resolve(name: str, namespace: str = "/") -> str:
    """A topic name as the node in `namespace` resolves it (no ~ or substitutions)."""
    if name.startswith("/"):
        return name
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    return f"{ns}/{name}"


def expert_topics(params: dict | None, extra: Sequence[str] = ()) -> list[str]:
    """The further experts' trajectory topics (unresolved): one per extra expert of the
    params' `model` (its profile's config, no weights loaded), `expert_trajectory_topics[i]`
    or, where that is missing or "", the node's default joint_trajectory/<expert name>;
    then `extra` (given by hand). ValueError for an unknown model profile."""
    names = []
    if params:
        from ..engine.registry import get_config   # the registry the node loads its model from
        from ..node.expert_outputs import expert_topic
        from ..node.params import SPEC

        experts = get_config(params.get("model", SPEC["model"].default)).extra_experts
        given = list(params.get("expert_trajectory_topics") or [])
        names = [expert_topic(e.name, given, i) for i, e in enumerate(experts)]
    return list(dict.fromkeys([*names, *extra]))


def topics(namespace: str = "/", params: dict | None = None,
           experts: Sequence[str] = ()) -> list[tuple[str, Topic]]:
    """(resolved name, Topic) for every recorded topic; `params` (the node's parameters,
    e.g. from its params file) may rename them as the node would; `experts`: the further
    experts' trajectory topics (expert_topics()), after the fixed ones."""
    params = params or {}
    out = [(resolve(params.get(t.key, t.name) if t.key else t.name, namespace), t) for t in RECORDED]
    out += [(resolve(name, namespace), Topic("expert_trajectory_topics", name, TRAJECTORY)) for name in experts]
    unique: dict[str, Topic] = {}     # a topic given twice (by hand and in the params) is recorded once
    for name, t in out:
        unique.setdefault(name, t)
    return list(unique.items())


def ros2_bag_command(out: str = "BAG_DIR", namespace: str = "/", storage: str = "mcap",
                     params: dict | None = None, experts: Sequence[str] = ()) -> str:
    """The equivalent `ros2 bag record` command line."""
    names = " ".join(name for name, _ in topics(namespace, params, experts))
    return f"ros2 bag record -s {storage} -o {out} {names}"


def message_class(msgtype: str):
    pkg, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def _bag_qos(latched: bool, best_effort: bool = False):
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    zero = QosTime(0, 0)
    return Qos(QosHistory.KEEP_LAST, DEPTH, QosReliability.BEST_EFFORT if best_effort else QosReliability.RELIABLE,
               QosDurability.TRANSIENT_LOCAL if latched else QosDurability.VOLATILE,
               zero, zero, QosLiveliness.AUTOMATIC, zero, False)


class BagRecorder:
    """Subscribes `node` to the topics and writes every message to a new bag at `out`.

    Callbacks write directly (use a single-threaded executor); `close()` removes the
    subscriptions and finalises the bag (metadata.yaml, MCAP summary/index).
    expert_topics: the further experts' trajectory topics (see expert_topics()).
    """

    def __init__(self, node, out: str | Path, namespace: str = "/", params: dict | None = None,
                 storage: str = "mcap", cameras: bool = False, camera_hz: float = 5.0,
                 jpeg_quality: int = 90, expert_topics: Sequence[str] = ()):
        from ..node import qos as node_qos
        from rosbags.rosbag2 import StoragePlugin, Writer

        out = Path(out)
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()                    # an empty folder is fine; rosbags creates it anew
        if out.exists():
            raise FileExistsError(f"{out} exists; choose a new folder for the bag")
        plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
        self.node, self.path = node, out
        self.writer = Writer(out, version=9, storage_plugin=plugin)
        self.writer.set_custom_data("recorded_by", "oxygen record (oxygen_ros)")
        recorded = topics(namespace, params, expert_topics)
        self.output_topics = [name for name, t in recorded if t.msgtype != TF]   # the node's (tf: the sim's)
        self.writer.set_custom_data(TRAJECTORY_KEY, next(n for n, t in recorded if t.key == "trajectory_topic"))
        self.writer.set_custom_data(EXPERT_TRAJECTORIES_KEY, ",".join(
            name for name, t in recorded if t.key == "expert_trajectory_topics"))
        self.writer.set_custom_data(RECORDER_NODE_KEY, node.get_fully_qualified_name())
        self.writer.open()
        self.counts: dict[str, int] = {}
        self._subs = []
        store = bag_types.typestore()
        for name, t in recorded:
            conn = self.writer.add_connection(name, t.msgtype, typestore=store,
                                              offered_qos_profiles=[_bag_qos(t.latched)])
            qos = (node_qos.latched if t.latched else node_qos.reliable)(DEPTH)
            self.counts[name] = 0
            self._subs.append(node.create_subscription(
                message_class(t.msgtype), name, lambda data, c=conn: self._write(c, data), qos, raw=True))
        if cameras:
            self._add_inputs(namespace, params or {}, store, camera_hz, jpeg_quality)

    def _add_inputs(self, namespace, params, store, camera_hz, jpeg_quality) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from rclpy.serialization import serialize_message
        from sensor_msgs.msg import CompressedImage, Image, JointState

        from ..node.cameras import compressed_topic, transport_of
        from ..node.convert import InputError, image_to_rgb, rgb_to_compressed

        sensor = _bag_qos(False, best_effort=True)
        name = resolve(params.get("joint_state_topic", "joint_states"), namespace)
        conn = self.writer.add_connection(name, "sensor_msgs/msg/JointState", typestore=store,
                                          offered_qos_profiles=[sensor])
        self.counts[name] = 0
        self._subs.append(self.node.create_subscription(
            JointState, name, lambda data, c=conn: self._write(c, data), qos_profile_sensor_data, raw=True))
        topics = params.get("camera_topics", ["camera/base/image_raw"])
        transports = list(params.get("camera_transports", []))
        min_gap = 1.0 / camera_hz if camera_hz > 0 else 0.0
        for i, topic in enumerate(topics):
            raw = transport_of(topic, transports[i] if i < len(transports) else "auto") == "raw"
            name = resolve(topic, namespace)
            bag_name = compressed_topic(name) if raw else name
            conn = self.writer.add_connection(bag_name, "sensor_msgs/msg/CompressedImage", typestore=store,
                                              offered_qos_profiles=[sensor])
            self.counts[bag_name] = 0
            last = [-1e9]

            def due(last=last) -> bool:      # the rate limit, on the recorder's steady clock
                now = time.monotonic()
                if now - last[0] < min_gap:
                    return False
                last[0] = now
                return True

            if raw:
                def on_raw(msg, c=conn, due=due):
                    if not due():
                        return
                    try:
                        out = rgb_to_compressed(image_to_rgb(msg), "jpeg", jpeg_quality)
                    except InputError:
                        return                      # the node reports bad images; the bag skips them
                    out.header = msg.header
                    self._write(c, serialize_message(out))
                self._subs.append(self.node.create_subscription(Image, name, on_raw, qos_profile_sensor_data))
            else:
                self._subs.append(self.node.create_subscription(
                    CompressedImage, name, lambda data, c=conn, due=due: due() and self._write(c, data),
                    qos_profile_sensor_data, raw=True))

    @property
    def topic_names(self) -> list[str]:
        return list(self.counts)

    MATCHED = "recorder matched the publishers of all"   # the line `oxygen demo` waits for
    MATCHED_PARAMETER_EVENTS = "recorder matched every /parameter_events publisher"
    NODE_NAME = "oxygen_recorder"                       # `oxygen demo` names it in await_recorders

    def report_when_matched(self, period_s: float = 0.1) -> None:
        """Print one line (MATCHED ...) once this recorder's own readers have matched every
        publisher the graph shows, at least one, on each of the node's topics: from then on
        nothing the node publishes misses the bag (DDS matches topic by topic). Not /tf: the
        sim's, not the node's. /parameter_events gets its own line (MATCHED_PARAMETER_EVENTS),
        at the first moment its reader matched as many publishers as the graph shows: every
        node publishes it, so the count changes as nodes come and go, and a caller that needs a
        parameter change in the bag waits for that line after its node started."""
        subs = [s for s in self._subs if s.topic_name in self.output_topics and s.topic_name != PARAMETER_EVENTS]
        events = [s for s in self._subs if s.topic_name == PARAMETER_EVENTS]

        def matched(group) -> bool:
            return all(0 < self.node.count_publishers(s.topic_name) <= s.get_publisher_count() for s in group)

        waiting = {"outputs": True, "events": bool(events)}

        def check():
            if waiting["outputs"] and matched(subs):
                print(f"{self.MATCHED} {len(subs)} topics of the node", flush=True)
                waiting["outputs"] = False
            if waiting["events"] and matched(events):
                print(f"{self.MATCHED_PARAMETER_EVENTS} ({events[0].get_publisher_count()})", flush=True)
                waiting["events"] = False
            if not any(waiting.values()):
                timer.cancel()

        timer = self.node.create_timer(period_s, check)

    def _write(self, conn, data: bytes) -> None:
        if self.writer is None:
            return
        self.writer.write(conn, self.node.get_clock().now().nanoseconds, data)
        self.counts[conn.topic] += 1

    def close(self) -> None:
        """Stop recording and finalise the bag (idempotent)."""
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self._subs = []
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()
