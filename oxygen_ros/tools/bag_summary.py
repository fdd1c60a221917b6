"""Summarise a recorded run (tools/bag_read.py's RunData): action chunk rate, frame phases,
language request latencies, robot time:
- a request starts at the start of its `start_frame`, its first token is its first chunk
  with text, it is done at the chunk with done=true;
- robot time: FrameTiming's chunk_latency_ms (observation to the trajectory's
  publication) and chunk_ms (where in its frame the chunk left); the boundary jumps come
  from replaying the recorded trajectories, at the times the recorder received them,
  through the joint_trajectory_controller-like executor (tools/trajectory_executor.py);
- the arm: with joint states in the bag (`oxygen record --cameras`, `oxygen demo`), the
  tracking error and the switches scored on the measured joints beside the commanded
  ones (tools/arm_motion.py);
- several action experts: the further experts' trajectories counted, with their latency
  from stamp to receipt.
The lines a person reads: bag_summary_text.py. ROS-free: numpy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bag_read import TIMING_PHASES, Request, RunData


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
        "points_published": sum(len(t[3]) for t in data.trajectories),
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
