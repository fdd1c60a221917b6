"""Read a recorded run into RunData: a rosbag2 bag (MCAP or sqlite3, from `oxygen record`
or `ros2 bag record`), with rosbags; topics are recognised by type, so any namespace works.
Times come from the messages' header stamps (the node's clock):
- a JointTrajectory is one action chunk; FrameTiming gives each frame's phases and
  whether it missed its deadline; its stamp is the end of the frame, and the frame
  started total_ms earlier (the node submits new language requests at that start);
- TextChunks carry their frame's stamp, so a request's chunks map to frames;
- joint states (`oxygen record --cameras`, `oxygen demo`) are kept for the arm's scores;
- several action experts: the first expert's JointTrajectory topic is the main one
  (main_trajectory_topic); the further experts' trajectories are kept apart
  (RunData.expert_trajectories);
- parameter changes: /parameter_events' accepted changes, each at its receipt time since
  the bag's start, with the old value where the bag saw it (tools/bag_parameters.py).
The run's figures: bag_summary.py; the lines a person reads: bag_summary_text.py.
ROS-free: rosbags.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import bag_types
from .bag_parameters import PARAMETER_EVENT, parameter_changes
from .bag_recorder import EXPERT_TRAJECTORIES_KEY, RECORDER_NODE_KEY, TRAJECTORY, TRAJECTORY_KEY

TIMING = "oxygen_msgs/msg/FrameTiming"
TEXT = "oxygen_msgs/msg/TextChunk"
DIAGNOSTICS = "diagnostic_msgs/msg/DiagnosticArray"
JOINT_STATE = "sensor_msgs/msg/JointState"
# FrameTiming's phase fields (<phase>_ms). The engine's own PHASES (engine/frame.py) also
# has "vision", which FrameTiming counts in prefill_ms.
TIMING_PHASES = ("prefill", "action", "admit", "decode")


@dataclass
class Frame:
    index: int
    end_s: float               # header stamp (s, node clock)
    total_ms: float
    phases_ms: dict
    period_ms: float
    missed: bool
    tokens: int
    decode_steps: int
    live_requests: int
    chunk_ms: float | None = None          # None in bags from before the chunk went out first
    chunk_latency_ms: float | None = None
    points_dropped: int = 0
    rtc_delay_steps: int = 0
    expert_ms: dict = field(default_factory=dict)   # further action experts: name -> ms

    @property
    def start_s(self) -> float:
        return self.end_s - self.total_ms / 1e3


@dataclass
class Request:
    stream: str
    request_id: int
    start_frame: int
    chunks: list = field(default_factory=list)   # (stamp s, delta, token_count, done, full_text)

    @property
    def done(self) -> bool:
        return any(c[3] for c in self.chunks)

    @property
    def text(self) -> str:
        final = [c[4] for c in self.chunks if c[3]]
        return final[-1] if final else "".join(c[1] for c in self.chunks)


@dataclass
class RunData:
    bag: str
    chunks: list            # (stamp s, number of points, time between points s)
    trajectories: list      # (received s, joint names, stamp s, times_from_start, positions, velocities | None)
    frames: list            # Frame, in stamp order
    requests: list          # Request, in order of first chunk
    loop_diagnostics: dict  # the last "control loop" status values from /diagnostics
    topics: dict            # topic -> (type, message count)
    joint_states: list = field(default_factory=list)   # (stamp s, names, positions, velocities)
    replayed: tuple | None = None   # boundary_jumps() of this run, computed once
    arm: object = None              # arm_track(): False once known to be absent
    trajectory_topic: str | None = None   # the first expert's topic (chunks, trajectories)
    trajectory_note: str | None = None    # how it was chosen, when the bag did not say
    expert_trajectories: dict = field(default_factory=dict)   # further experts: topic -> as trajectories
    parameter_changes: list = field(default_factory=list)     # bag_parameters.parameter_changes()


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def bag_dir(path: str | Path) -> Path:
    """The rosbag2 folder (accepts the folder, its metadata.yaml or its storage file)."""
    p = Path(path)
    if p.is_file() and (p.parent / "metadata.yaml").is_file():
        return p.parent
    if not (p / "metadata.yaml").is_file():
        raise FileNotFoundError(f"{path}: not a rosbag2 folder (no metadata.yaml)")
    return p


def typestore_for(connections):
    """oxygen_msgs + Jazzy types, overridden by the .msg definitions stored in the bag
    (no hash check: a bag from another ROS build may hash its types differently)."""
    from rosbags.interfaces import MessageDefinitionFormat
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    types = dict(bag_types.typestore().fielddefs)
    for c in connections:
        if c.msgdef.format == MessageDefinitionFormat.MSG and c.msgdef.data:
            try:
                types.update(get_types_from_msg(c.msgdef.data, c.msgtype))
            except Exception:  # noqa: BLE001 - keep the known definition
                pass
    store = get_typestore(Stores.EMPTY)
    store.register(types)
    return store


def main_trajectory_topic(counts: dict, custom: dict | None = None) -> tuple[str | None, str | None]:
    """(the first expert's topic, a note when it was guessed) among the bag's JointTrajectory
    topics `counts` (topic -> message count). `custom`: the bag's custom data, where
    `oxygen record` names it (bag_recorder.TRAJECTORY_KEY). Otherwise the one topic that is
    not a further expert's (custom data), else the one named .../joint_trajectory (the
    node's default; further experts default to joint_trajectory/<name>), else the busiest."""
    custom = custom or {}
    if not counts:
        return None, None
    if custom.get(TRAJECTORY_KEY) in counts:
        return custom[TRAJECTORY_KEY], None
    experts = set(filter(None, custom.get(EXPERT_TRAJECTORIES_KEY, "").split(",")))
    for candidates in ([t for t in counts if t not in experts],
                       [t for t in counts if t.rsplit("/", 1)[-1] == "joint_trajectory"]):
        if len(candidates) == 1:
            return candidates[0], None
    main = max(counts, key=lambda t: (counts[t], t))
    return main, (f"{len(counts)} JointTrajectory topics and none is .../joint_trajectory: took "
                  f"{main} ({counts[main]} messages, the most) as the first expert's")


def custom_data(path: Path) -> dict:
    """The bag's custom data (metadata.yaml; rosbags' Reader does not expose it)."""
    import yaml

    meta = yaml.safe_load((path / "metadata.yaml").read_text()) or {}
    return meta.get("rosbag2_bagfile_information", {}).get("custom_data") or {}


def read_bag(path: str | Path) -> RunData:
    from rosbags.rosbag2 import Reader

    path = bag_dir(path)
    by_topic, frames, requests, diag, states, events = {}, [], {}, {}, [], []
    custom = custom_data(path)
    with Reader(path) as reader:
        wanted = [c for c in reader.connections
                  if c.msgtype in (TRAJECTORY, TIMING, TEXT, DIAGNOSTICS, JOINT_STATE, PARAMETER_EVENT)]
        store = typestore_for(wanted)
        topics = {c.topic: (c.msgtype, c.msgcount) for c in reader.connections}
        main, note = main_trajectory_topic({t: n for t, (ty, n) in topics.items() if ty == TRAJECTORY}, custom)
        # rosbags reads every connection for an empty list: a bag of other topics only has none
        for conn, log_ns, raw in reader.messages(connections=wanted) if wanted else ():
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.msgtype == TRAJECTORY:
                pts = msg.points
                times = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in pts]
                with_vel = bool(pts) and all(len(p.velocities) for p in pts)
                by_topic.setdefault(conn.topic, []).append(
                    (log_ns * 1e-9, list(msg.joint_names), _stamp(msg), times,
                     [list(p.positions) for p in pts],
                     [list(p.velocities) for p in pts] if with_vel else None))
            elif conn.msgtype == TIMING:
                frames.append(Frame(int(msg.frame_index), _stamp(msg), float(msg.total_ms),
                                    {ph: float(getattr(msg, f"{ph}_ms")) for ph in TIMING_PHASES},
                                    float(msg.period_ms), bool(msg.deadline_missed),
                                    int(msg.tokens_emitted), int(msg.decode_steps), int(msg.live_requests),
                                    _optional(msg, "chunk_ms"), _optional(msg, "chunk_latency_ms"),
                                    int(getattr(msg, "points_dropped", 0)),
                                    int(getattr(msg, "rtc_delay_steps", 0)),
                                    dict(zip(getattr(msg, "expert_names", []),
                                             (float(v) for v in getattr(msg, "expert_action_ms", []))))))
            elif conn.msgtype == PARAMETER_EVENT:
                events.append(((log_ns - reader.start_time) * 1e-9, msg))
            elif conn.msgtype == JOINT_STATE:
                states.append((_stamp(msg), list(msg.name), list(msg.position), list(msg.velocity)))
            elif conn.msgtype == TEXT:
                key = (msg.stream, int(msg.request_id))
                if key not in requests:
                    requests[key] = Request(msg.stream, int(msg.request_id), int(msg.start_frame))
                requests[key].chunks.append((_stamp(msg), msg.delta, int(msg.token_count), bool(msg.done),
                                             msg.full_text))
            else:
                for status in msg.status:
                    if status.name.endswith(": control loop"):
                        diag = {kv.key: kv.value for kv in status.values}
    for msgs in by_topic.values():
        msgs.sort(key=lambda t: t[0])
    trajectories = by_topic.pop(main, [])
    # a chunk: (stamp, number of points, time between its first two points)
    chunks = sorted((t[2], len(t[3]), t[3][1] - t[3][0] if len(t[3]) >= 2 else 0.0) for t in trajectories)
    frames.sort(key=lambda f: f.end_s)
    reqs = sorted(requests.values(), key=lambda r: min(c[0] for c in r.chunks))
    for r in reqs:
        r.chunks.sort(key=lambda c: (c[0], c[2]))
    return RunData(str(path), chunks, trajectories, frames, reqs, diag, topics, states,
                   trajectory_topic=main, trajectory_note=note, expert_trajectories=dict(sorted(by_topic.items())),
                   parameter_changes=parameter_changes(events, [custom.get(RECORDER_NODE_KEY)]))


def _optional(msg, name: str) -> float | None:
    """A FrameTiming field that older bags' definitions lack (None there)."""
    value = getattr(msg, name, None)
    return None if value is None else float(value)
