"""Scoring `oxygen eval`'s episodes, ROS-free, from each bag alone, and their statistics.

`score_bag`: the cube's place over time by
tools/cube_place.py on the bag's /tf (tools/bag_task.py), cut at the episode's end; success:
the bowl at the end. A narration (oxygen_msgs/TextChunk, stream "narration", done) is right
when it names exactly one of "table", "gripper", "bowl" and that is the cube's place at the
observation stamp (FrameTiming.observation_stamp) of its start_frame.
"""
from __future__ import annotations

import bisect
import math
import re

from . import cube_place
from .bag_read import TEXT, TIMING, bag_dir, typestore_for
from .bag_task import read_places

TRAINING_SEEDS = range(1000, 2000)
HELD_OUT_FROM = 900000
_PLACE_WORDS = re.compile(r"\b(table|gripper|bowl)s?\b", re.IGNORECASE)


# -- seeds and statistics ---------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """"900000-900049", "5,7,9-11" -> the seeds, in order, without repeats."""
    seeds = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"seed range {part!r} runs backwards")
        seeds += [s for s in range(a, b + 1) if s not in seeds]
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    return seeds


def training_seeds_in(seeds) -> list[int]:
    return [s for s in seeds if s in TRAINING_SEEDS]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The 95% Wilson score interval of a success rate (None for n = 0)."""
    if n == 0:
        return None
    p = successes / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def named_places(text: str) -> set[str]:
    """Which of table / gripper / bowl a text names (plural forms count)."""
    return {m.group(1).lower() for m in _PLACE_WORDS.finditer(text)}


# -- scoring a bag ------------------------------------------------------------------------------
def read_frames_and_narrations(bag) -> tuple[dict, list]:
    """({frame_index: observation stamp s}, [(start_frame, full text)] of the finished
    narrations) from a bag's FrameTiming and TextChunk messages."""
    from rosbags.rosbag2 import Reader

    frames, texts = {}, {}
    with Reader(bag_dir(bag)) as reader:
        wanted = [c for c in reader.connections if c.msgtype in (TIMING, TEXT)]
        store = typestore_for(wanted)
        for conn, _, raw in reader.messages(connections=wanted) if wanted else ():
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.msgtype == TIMING:
                s = msg.observation_stamp
                frames[int(msg.frame_index)] = s.sec + s.nanosec * 1e-9
            elif msg.stream == "narration" and msg.done:
                texts[int(msg.request_id)] = (int(msg.start_frame), msg.full_text)
    return frames, [texts[k] for k in sorted(texts)]


def place_at(times: list[float], places: list[str], t: float) -> str | None:
    """The place of the latest sample at or before t (the first one before any)."""
    if not times:
        return None
    return places[max(0, bisect.bisect_right(times, t + 1e-9) - 1)]


def score_bag(bag, end_s: float | None = None, start_stamp: float | None = None) -> dict:
    """An episode's score from its bag: the cube's places (by the report's scoring) up to
    `end_s` seconds after `start_stamp` (default: the first frame's observation stamp, else
    the first /tf), success (the bowl at that end), frames, frames that repeated the previous
    frame's observation, and every narration judged against the place at its frame; frames
    observed after the end, and their narrations, are not the episode's."""
    times, places, tf_count = read_places(bag)
    frames, narrations = read_frames_and_narrations(bag)
    if start_stamp is None:
        start_stamp = frames[min(frames)] if frames else (times[0] if times else 0.0)
    if end_s is not None:       # the episode's end cuts its places, frames and narrations
        last = start_stamp + end_s + 1e-9
        keep = bisect.bisect_right(times, last)
        times, places = times[:keep], places[:keep]
        narrations = [(f, text) for f, text in narrations if frames.get(f, last) <= last]
        frames = {k: v for k, v in frames.items() if v <= last}
    rel = [t - start_stamp for t in times]
    segs = cube_place.segments(rel, places)
    for s in segs:
        s["start_s"], s["end_s"] = round(s["start_s"], 3), round(s["end_s"], 3)
    success = cube_place.success(places)
    judged = []
    for start_frame, text in narrations:
        stamp = frames.get(start_frame)
        truth = place_at(times, places, stamp) if stamp is not None else None
        named = sorted(named_places(text))
        judged.append({"start_frame": start_frame, "stamp_s": None if stamp is None else round(stamp - start_stamp, 3),
                       "text": text, "named": named, "place": truth, "right": truth is not None and named == [truth]})
    stamps = [frames[k] for k in sorted(frames)]
    right = sum(j["right"] for j in judged)
    return {
        "success": success,
        "final_place": places[-1] if places else None,
        "places": segs,
        "time_to_success_s": segs[-1]["start_s"] if success else None,
        "length_s": round(rel[-1], 3) if rel else 0.0,
        "tf_messages": tf_count,
        "frames": len(frames),
        "repeated_observation_frames": sum(a == b for a, b in zip(stamps, stamps[1:])),
        "narrations": len(judged),
        "narrations_right": right,
        "narration_accuracy": right / len(judged) if judged else None,
        "narration_samples": judged,
    }


def summarize(episodes: list[dict]) -> dict:
    """Success rate with its Wilson interval, episode lengths and narration accuracy."""
    n = len(episodes)
    k = sum(bool(e.get("success")) for e in episodes)
    narr = sum(e.get("narrations", 0) for e in episodes)
    right = sum(e.get("narrations_right", 0) for e in episodes)
    lengths = [e["length_s"] for e in episodes if e.get("length_s") is not None]
    wall = [e["wall_s"] for e in episodes if e.get("wall_s") is not None]
    ci = wilson(k, n)
    return {"episodes": n, "successes": k, "success_rate": k / n if n else None,
            "success_wilson95": [round(ci[0], 4), round(ci[1], 4)] if ci else None,
            "mean_length_s": round(sum(lengths) / len(lengths), 3) if lengths else None,
            "narrations": narr, "narrations_right": right,
            "narration_accuracy": right / narr if narr else None,
            "mean_wall_s": round(sum(wall) / len(wall), 2) if wall else None,
            "failed_to_run": sum(bool(e.get("error")) for e in episodes)}


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_table(result: dict) -> str:
    """The printed table: one row per robot (one row for a single robot), then all."""
    rows = [("robot", "episodes", "success", "95% Wilson", "length s", "narration acc.", "wall s/ep")]
    groups = list(result["per_robot"].items())
    if len(groups) > 1:
        groups.append(("all", result["overall"]))
    for name, s in groups:
        ci = s["success_wilson95"]
        rows.append((name, str(s["episodes"]), f"{s['successes']}/{s['episodes']} {_pct(s['success_rate'])}",
                     f"{_pct(ci[0])}-{_pct(ci[1])}" if ci else "-",
                     "-" if s["mean_length_s"] is None else f"{s['mean_length_s']:.1f}",
                     f"{s['narrations_right']}/{s['narrations']} {_pct(s['narration_accuracy'])}",
                     "-" if s["mean_wall_s"] is None else f"{s['mean_wall_s']:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def episode_line(i: int, total: int, e: dict) -> str:
    if e.get("error"):
        return f"[{i}/{total}] {e['robot'] + ' ' if e['robot'] else ''}seed {e['seed']}: no result: {e['error']}"
    how = (f"success (in the bowl from {e['time_to_success_s']:.1f} s)" if e["success"]
           else f"failure (ends {cube_place.where(e['final_place'])})")
    narr = (f"narration {e['narrations_right']}/{e['narrations']} right" if e["narrations"] else "no narration")
    return (f"[{i}/{total}] {e['robot'] + ' ' if e['robot'] else ''}seed {e['seed']}: {how}, "
            f"{e['length_s']:.1f} s, {e['frames']} frames, {narr}, {e['wall_s']:.1f} s wall")
