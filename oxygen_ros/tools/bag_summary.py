"""Summarise a recorded run: action chunk rate, frame phases, language request latencies.

Reads a rosbag2 bag (MCAP or sqlite3, from `oxygen record` or `ros2 bag record`) with
rosbags; topics are recognised by type, so any namespace works. Times come from the
messages' header stamps (the node's clock):
- a JointTrajectory is one action chunk; FrameTiming gives each frame's phases and
  whether it missed its deadline; its stamp is the end of the frame, and the frame
  started total_ms earlier (the node submits new language requests at that start);
- TextChunks carry their frame's stamp, so a request's chunks map to frames; a request
  starts at the start of its `start_frame`, its first token is its first chunk with
  text, it is done at the chunk with done=true;
- robot time: FrameTiming's chunk_latency_ms (observation to the trajectory's
  publication) and chunk_ms (where in its frame the chunk left); the boundary jumps come
  from replaying the recorded trajectories, at the times the recorder received them,
  through the joint_trajectory_controller-like executor (tools/trajectory_executor.py);
- the arm: with joint states in the bag (`oxygen record --cameras`, `oxygen demo`), the
  tracking error and the switches scored on the measured joints beside the commanded
  ones (tools/arm_motion.py).
- several action experts: the first expert's JointTrajectory topic is the main one
  (main_trajectory_topic); the further experts' trajectories are kept apart
  (RunData.expert_trajectories) and counted, with their latency from stamp to receipt.
- parameter changes: /parameter_events' accepted changes, each at its receipt time since
  the bag's start, with the old value where the bag saw it (tools/bag_parameters.py).
ROS-free: rosbags + numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import bag_types
from .bag_parameters import PARAMETER_EVENT, format_changes, parameter_changes
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


def boundary_jumps(data: RunData) -> tuple[list, list]:
    """(BoundaryJump per trajectory switch, rejection reasons): the recorded trajectories
    replayed through the controller-like executor at the times they were received, once
    per RunData (the summary and the timeline both use them)."""
    from .trajectory_executor import replay

    if data.replayed is None:
        if not data.trajectories:
            data.replayed = ([], [])
        else:
            _, names, _, _, positions, _ = data.trajectories[0]
            data.replayed = replay(data.trajectories, names, positions[0] if positions else [0.0] * len(names))
    return data.replayed


def arm_track(data: RunData):
    """The run's tools/arm_motion.ArmTrack (None without joint states), computed once."""
    from .arm_motion import track

    if data.arm is None:
        data.arm = track(data.trajectories, data.joint_states) or False
    return data.arm or None


def robot_time_summary(data: RunData) -> dict:
    from .trajectory_executor import jump_stats

    frames = [f for f in data.frames if f.chunk_latency_ms is not None]
    jumps, rejected = boundary_jumps(data)
    return {
        "chunk_latency_ms": _stats([f.chunk_latency_ms for f in frames]),
        "chunk_in_frame_ms": _stats([f.chunk_ms for f in frames]),
        "frame_total_ms": _stats([f.total_ms for f in frames]),
        "points_dropped": sum(f.points_dropped for f in frames),
        "rtc_guided_frames": sum(f.rtc_delay_steps > 0 for f in frames),
        "rtc_delay_steps_mean": float(np.mean([f.rtc_delay_steps for f in frames])) if frames else None,
        "boundary_jumps": jump_stats(jumps),
        "trajectories_rejected": len(rejected),
        "rejections": sorted(set(rejected))[:5],
        "arm": arm.summary() if (arm := arm_track(data)) else None,
    }


def receive_latency_ms(trajectories: list) -> list[float]:
    """Each trajectory's header stamp (its observation) to its receipt by the recorder, ms."""
    return [(received - stamp) * 1e3 for received, _, stamp, *_ in trajectories]


def experts_summary(data: RunData) -> dict | None:
    """The further experts' trajectories beside the first expert's (None for one expert):
    chunk counts and stamp-to-receipt latency, the first expert's too for comparison."""
    if not data.expert_trajectories:
        return None

    def one(trajectories):
        return {"count": len(trajectories), "receive_latency_ms": _stats(receive_latency_ms(trajectories))}

    return {"trajectory_topic": data.trajectory_topic, "note": data.trajectory_note,
            "first": one(data.trajectories),
            "by_topic": {t: one(msgs) for t, msgs in data.expert_trajectories.items()}}


def _stats(values) -> dict:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
            "p95": float(np.percentile(v, 95)), "max": float(v.max())}


def _round(x, nd=3):
    if isinstance(x, float):
        return round(x, nd)
    if isinstance(x, dict):
        return {k: _round(v, nd) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v, nd) for v in x]
    return x


def time_origin(data: RunData) -> float:
    """Start of the run: the start of the first frame, else the first message."""
    starts = [f.start_s for f in data.frames[:1]] + [c[0] for c in data.chunks[:1]]
    starts += [r.chunks[0][0] for r in data.requests[:1]]
    return min(starts) if starts else 0.0


def time_end(data: RunData) -> float:
    ends = [f.end_s for f in data.frames[-1:]] + [c[0] for c in data.chunks[-1:]]
    ends += [r.chunks[-1][0] for r in data.requests]
    return max(ends) if ends else 0.0


@dataclass
class FrameLookup:
    """Frames by their stamp (TextChunks carry their frame's stamp) and by index."""
    by_stamp: dict
    by_index: dict

    @classmethod
    def of(cls, data: RunData) -> "FrameLookup":
        by_index = {}
        for f in data.frames:
            by_index.setdefault(f.index, []).append(f)    # an index repeats if the node restarted
        return cls({round(f.end_s, 6): f for f in data.frames}, by_index)


def request_timeline(data: RunData, r: Request, t0: float = 0.0, lookup: FrameLookup | None = None) -> dict:
    """Frames and seconds of one request: start, first token, done (None when unknown);
    start_s, first_chunk_s and last_chunk_s are relative to t0."""
    lookup = lookup or FrameLookup.of(data)
    by_stamp = lookup.by_stamp
    first_stamp = r.chunks[0][0]
    # the start frame: the latest frame with that index that ended before the first chunk
    candidates = [f for f in lookup.by_index.get(r.start_frame, []) if f.end_s <= first_stamp + 1e-6]
    start = candidates[-1] if candidates else None
    t_start = start.start_s if start else first_stamp
    with_text = [c for c in r.chunks if c[2] > 0] or r.chunks
    t_first = with_text[0][0]
    done = [c for c in r.chunks if c[3]]
    t_done = done[0][0] if done else None

    def frame_of(t):
        f = by_stamp.get(round(t, 6))
        return f.index if f else None

    first_frame, done_frame = frame_of(t_first), frame_of(t_done) if t_done is not None else None
    tokens = max(c[2] for c in r.chunks)
    out = {
        "stream": r.stream, "request_id": r.request_id, "start_frame": r.start_frame,
        "first_token_frame": first_frame, "done_frame": done_frame, "done": t_done is not None,
        "frames_to_first_token": first_frame - r.start_frame if first_frame is not None else None,
        "frames_to_done": done_frame - r.start_frame if done_frame is not None else None,
        "seconds_to_first_token": t_first - t_start,
        "seconds_to_done": t_done - t_start if t_done is not None else None,
        "tokens": tokens,
        "tokens_per_s": tokens / (t_done - t_start) if t_done is not None and t_done > t_start else None,
        "start_s": t_start - t0, "first_chunk_s": r.chunks[0][0] - t0, "last_chunk_s": r.chunks[-1][0] - t0,
        "text": r.text,
    }
    return out


def summarize(data: RunData) -> dict:
    t0 = time_origin(data)
    stamps = [c[0] for c in data.chunks]
    intervals_ms = np.diff(stamps) * 1e3 if len(stamps) > 1 else np.array([])
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    period_ms = float(np.median([f.period_ms for f in data.frames])) if data.frames else None
    frames = data.frames
    misses = sum(f.missed for f in frames)
    tokens = sum(f.tokens for f in frames)
    frame_span = frames[-1].end_s - frames[0].start_s if frames else 0.0
    lookup = FrameLookup.of(data)
    reqs = [request_timeline(data, r, t0, lookup) for r in data.requests]
    by_stream = {}
    for stream in sorted({r["stream"] for r in reqs}):
        rs = [r for r in reqs if r["stream"] == stream]
        done = [r for r in rs if r["done"]]

        def mean(key, rows=done):
            vals = [r[key] for r in rows if r[key] is not None]
            return float(np.mean(vals)) if vals else None

        by_stream[stream] = {"requests": len(rs), "done": len(done),
                             "seconds_to_first_token_mean": mean("seconds_to_first_token", rs),
                             "seconds_to_done_mean": mean("seconds_to_done"),
                             "frames_to_done_mean": mean("frames_to_done"),
                             "tokens_per_s_mean": mean("tokens_per_s")}
    loop = data.loop_diagnostics
    summary = {
        "bag": data.bag,
        "duration_s": time_end(data) - t0,
        "chunks": {
            "count": len(stamps),
            "interval_ms": _stats(intervals_ms),
            "achieved_rate_hz": (len(stamps) - 1) / span if span > 0 else None,
            "target_rate_hz": 1e3 / period_ms if period_ms else None,
            "points_per_chunk": int(np.median([c[1] for c in data.chunks])) if data.chunks else None,
            "point_period_s": float(np.median([c[2] for c in data.chunks])) if data.chunks else None,
        },
        "frames": {
            "count": len(frames),
            "period_ms": period_ms,
            "deadline_misses": misses,
            "deadline_miss_fraction": misses / len(frames) if frames else None,
            "skipped_ticks": int(loop["skipped_ticks"]) if "skipped_ticks" in loop else None,
            "total_ms": _stats([f.total_ms for f in frames]),
            "phase_ms_mean": {ph: float(np.mean([f.phases_ms[ph] for f in frames])) if frames else None
                              for ph in TIMING_PHASES},
            # a multi-expert model's further experts, each its own phase
            "expert_action_ms_mean": {name: float(np.mean([f.expert_ms[name] for f in frames if name in f.expert_ms]))
                                      for name in dict.fromkeys(n for f in frames for n in f.expert_ms)},
        },
        "language": {
            "requests": len(reqs),
            "done": sum(r["done"] for r in reqs),
            "tokens": tokens,
            "tokens_per_s": tokens / frame_span if frame_span > 0 else None,
            "by_stream": by_stream,
        },
        "robot_time": robot_time_summary(data),
        "requests": reqs,
        "topics": {t: {"type": ty, "messages": n} for t, (ty, n) in data.topics.items()},
    }
    experts = experts_summary(data)
    if experts is not None:       # only for multi-expert bags: a one-expert summary stays as it was
        summary["experts"] = experts
    summary["rate_held"] = rate_held(summary)
    summary = _round(summary)
    summary["parameter_changes"] = data.parameter_changes    # the values as set, not rounded
    return summary


# The rate counts as held when chunks came at >= 95% of the target rate and fewer than 5%
# of the frames overran their period (one slow frame in a run is not a failure).
HELD_RATE_FRACTION = 0.95
HELD_MISS_FRACTION = 0.05


def rate_held(s: dict) -> bool | None:
    achieved, target = s["chunks"]["achieved_rate_hz"], s["chunks"]["target_rate_hz"]
    misses = s["frames"]["deadline_miss_fraction"]
    if achieved is None or target is None or misses is None:
        return None
    return achieved >= HELD_RATE_FRACTION * target and misses < HELD_MISS_FRACTION


def format_summary(s: dict) -> str:
    """A few lines a person reads in a terminal."""
    def f(x, fmt="{:.1f}"):
        return "-" if x is None else fmt.format(x)

    c, fr, lang = s["chunks"], s["frames"], s["language"]
    iv = c["interval_ms"]
    lines = [
        f"action chunks: {c['count']} in {f(s['duration_s'])} s, {f(c['achieved_rate_hz'], '{:.2f}')} Hz "
        f"(target {f(c['target_rate_hz'], '{:.2f}')} Hz); interval ms mean {f(iv['mean'])} "
        f"p50 {f(iv['p50'])} p95 {f(iv['p95'])} max {f(iv['max'])}",
        f"frames: {fr['count']}, deadline misses {fr['deadline_misses']}"
        + (f", skipped ticks {fr['skipped_ticks']}" if fr["skipped_ticks"] is not None else "")
        + f"; frame ms p50 {f(fr['total_ms']['p50'])} p95 {f(fr['total_ms']['p95'])}; mean split "
        + " / ".join(f"{ph} {f(v)}" for ph, v in fr["phase_ms_mean"].items())
        + "".join(f" / action:{n} {f(v)}" for n, v in fr.get("expert_action_ms_mean", {}).items()),
        f"language: {lang['requests']} requests ({lang['done']} done), {lang['tokens']} tokens, "
        f"{f(lang['tokens_per_s'])} tok/s",
    ]
    held, miss = s.get("rate_held"), fr["deadline_miss_fraction"]
    if held is not None:
        lines.insert(2, (f"rate held: {f(c['achieved_rate_hz'], '{:.2f}')} of {f(c['target_rate_hz'], '{:.2f}')} Hz, "
                         f"{100 * miss:.1f}% of frames over their deadline" if held else
                         f"RATE NOT HELD: {f(c['achieved_rate_hz'], '{:.2f}')} of {f(c['target_rate_hz'], '{:.2f}')} Hz, "
                         f"{fr['deadline_misses']} of {fr['count']} frames ({100 * miss:.1f}%) over their "
                         f"{f(fr['period_ms'], '{:.0f}')} ms deadline: lower control_rate_hz or steps_per_frame"))
    rt = s.get("robot_time")
    if rt:
        lat, j = rt["chunk_latency_ms"], rt["boundary_jumps"]
        lines.append(
            f"robot time: chunk latency ms p50 {f(lat['p50'])} p95 {f(lat['p95'])} (observation to "
            f"trajectory; frame p50 {f(rt['frame_total_ms']['p50'])}), {rt['points_dropped']} past points dropped, "
            f"RTC on {rt['rtc_guided_frames']} frames; boundary jumps at {j['count']} switches: position max "
            f"{f(j['position_max'], '{:.4f}')} p95 {f(j['position_p95'], '{:.4f}')} rad, velocity max "
            f"{f(j['velocity_max'], '{:.3f}')} p95 {f(j['velocity_p95'], '{:.3f}')} rad/s"
            + (f"; {rt['trajectories_rejected']} trajectories REJECTED by the controller"
               if rt["trajectories_rejected"] else ""))
        arm = rt.get("arm")
        if arm:
            te, sw = arm["tracking_error"], arm["switches"]
            lines.append(
                f"arm ({arm['joint_states']} joint states): tracking error rms {f(te['rms'], '{:.4f}')} max "
                f"{f(te['max'], '{:.4f}')}; at {sw['actual']['count']} switches, velocity change max/p95 "
                f"commanded {f(sw['commanded']['velocity_change_max'], '{:.3f}')}/"
                f"{f(sw['commanded']['velocity_change_p95'], '{:.3f}')} vs actual "
                f"{f(sw['actual']['velocity_change_max'], '{:.3f}')}/{f(sw['actual']['velocity_change_p95'], '{:.3f}')}"
                f", course deviation commanded {f(sw['commanded']['course_deviation_max'], '{:.4f}')}/"
                f"{f(sw['commanded']['course_deviation_p95'], '{:.4f}')} vs actual "
                f"{f(sw['actual']['course_deviation_max'], '{:.4f}')}/{f(sw['actual']['course_deviation_p95'], '{:.4f}')}")
    ex = s.get("experts")
    if ex:
        if ex["note"]:
            lines.append(f"NOTE: {ex['note']}")
        first = ex["first"]
        lines.append(f"action experts (latency: header stamp to receipt by the recorder): first "
                     f"{ex['trajectory_topic']}: {first['count']} chunks, latency ms p50 "
                     f"{f(first['receive_latency_ms']['p50'])}")
        lines += [f"  expert {topic}: {e['count']} chunks, latency ms p50 {f(e['receive_latency_ms']['p50'])}"
                  for topic, e in ex["by_topic"].items()]
    for stream, b in lang["by_stream"].items():
        lines.append(f"  {stream}: {b['done']}/{b['requests']} done; first token {f(b['seconds_to_first_token_mean'], '{:.2f}')} s, "
                     f"done {f(b['seconds_to_done_mean'], '{:.2f}')} s ({f(b['frames_to_done_mean'])} frames), "
                     f"{f(b['tokens_per_s_mean'])} tok/s per request")
    lines += format_changes(s.get("parameter_changes", []))
    return "\n".join(lines)
