"""Side-by-side benchmark of the execution modes on one model, in one run.

Every mode sees the same observations, noise and requests (one new fixed-length
language request per frame). Figures are taken in the steady state: each mode first
runs warm-up frames until its pipeline holds its full batch, then `frames` frames are
measured. Exactness compares oxygen with sequential (isolated) execution.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from .baselines import ParallelEngine, SequentialEngine, SharedEngine
from .frame import PHASES
from .model import VLAModel
from .requests import LanguageRequest
from .scheduler import EngineConfig, OxygenEngine
from .workloads import get_workload, synthetic_frames

MODES = {"sequential": SequentialEngine, "shared": SharedEngine, "oxygen": OxygenEngine,
         "parallel": ParallelEngine}
BENCH_PROMPT = "Describe what the robot is doing."


@dataclass
class BenchSettings:
    workload: str = "libero"
    modes: tuple[str, ...] = ("sequential", "shared", "oxygen", "parallel")
    frames: int = 40
    tokens: int = 30
    steps_per_frame: int = 1
    extra_warmup: int = 3
    seed: int = 0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def warmup_frames(mode: str, s: BenchSettings) -> int:
    if mode == "oxygen":
        return math.ceil(s.tokens / s.steps_per_frame) + s.extra_warmup
    return s.extra_warmup


def run_mode(mode: str, model: VLAModel, tok, s: BenchSettings, frames, noises, log=print) -> dict:
    cfg = EngineConfig(max_requests=math.ceil(s.tokens / s.steps_per_frame) + 2,
                       max_new_tokens=max(s.tokens, 1), steps_per_frame=s.steps_per_frame,
                       seed=s.seed)
    engine = MODES[mode](model, tok, cfg)
    warm = warmup_frames(mode, s)
    total = warm + s.frames
    texts: dict[int, str] = {}
    order: list[int] = []
    actions: list[np.ndarray] = []
    timings, tokens, peak = [], 0, 0
    t_start = None
    try:
        for f in range(total):
            if f == warm:
                t_start = time.perf_counter()
            order.append(engine.submit(LanguageRequest(BENCH_PROMPT, "narration", s.tokens, ignore_eos=True)))
            res = engine.step(frames[f], noises[f])
            actions.append(res.actions)
            for d in res.finished:
                texts[d.request_id] = d.full_text
            if f >= warm:
                timings.append(res.timings_ms)
                tokens += res.tokens_emitted
                peak = max(peak, rss_bytes())
        wall = time.perf_counter() - t_start
        # drain (unmeasured) so every request can be compared
        f = total
        while mode in ("oxygen", "shared") and (engine.live or engine.pending):
            res = engine.step(frames[f % len(frames)], noises[f % len(noises)])
            f += 1
            for d in res.finished:
                texts[d.request_id] = d.full_text
    finally:
        if mode == "parallel":
            engine.close()
    horizon = model.cfg.expert.horizon
    med = {p: statistics.median(t[p] for t in timings) for p in PHASES}
    totals = [t["total"] for t in timings]
    kv = getattr(engine, "pool", None)
    out = {
        "warmup_frames": warm,
        "action_hz": horizon * s.frames / wall,
        "lang_tokens_per_s": tokens / wall,
        "frame_ms_median": statistics.median(totals),
        "frame_ms_p95": float(np.percentile(totals, 95)),
        **{f"{p}_ms": med[p] for p in PHASES},
        "peak_rss_bytes": peak,
        "kv_bytes": kv.bytes_total if kv is not None else 0,
    }
    log(f"  {mode:<10} done: {out['action_hz']:.1f} actions/s, {out['lang_tokens_per_s']:.1f} tok/s",
        file=sys.stderr)
    return {"metrics": out, "texts": [texts.get(r) for r in order], "actions": actions}


def run_bench(model: VLAModel, tok, s: BenchSettings, log=print) -> dict:
    wl = get_workload(s.workload)
    frames_needed = max(warmup_frames(m, s) for m in s.modes) + s.frames + 1
    frames = synthetic_frames(wl, model.cfg.camera_slots, model.cfg.vision.image_size,
                              frames_needed, s.seed)
    gen = torch.Generator().manual_seed(s.seed + 1)
    e = model.cfg.expert
    noises = [torch.randn(e.horizon, e.action_dim, generator=gen) for _ in frames]
    runs = {}
    for mode in s.modes:
        log(f"running {mode} ({warmup_frames(mode, s)} warm-up + {s.frames} frames)...", file=sys.stderr)
        runs[mode] = run_mode(mode, model, tok, s, frames, noises, log)
    report = {"settings": vars(s) | {"modes": list(s.modes)}, "model": model.cfg.name,
              "modes": {m: r["metrics"] for m, r in runs.items()}}
    base = runs.get("sequential")
    if base:
        report["ratios"] = {
            f"{m}/sequential": {k: runs[m]["metrics"][k] / base["metrics"][k]
                                for k in ("action_hz", "lang_tokens_per_s")}
            for m in runs if m != "sequential"}
    if base and "oxygen" in runs:
        report["exactness"] = exactness(runs["oxygen"], base)
    return report


def exactness(run: dict, reference: dict) -> dict:
    pairs = [(a, b) for a, b in zip(run["texts"], reference["texts"]) if a is not None and b is not None]
    n = min(len(run["actions"]), len(reference["actions"]))
    diff = max(float(np.abs(run["actions"][i] - reference["actions"][i]).max()) for i in range(n))
    return {"requests_compared": len(pairs),
            "text_mismatched_requests": sum(a != b for a, b in pairs),
            "max_action_abs_diff": diff}


def format_table(report: dict) -> str:
    cols = [("action_hz", "act/s", 8, 1), ("lang_tokens_per_s", "tok/s", 8, 1),
            ("frame_ms_median", "frame", 8, 1), ("frame_ms_p95", "p95", 8, 1),
            ("vision_ms", "vision", 7, 1), ("prefill_ms", "prefill", 8, 1),
            ("action_ms", "action", 8, 1), ("admit_ms", "admit", 7, 1),
            ("decode_ms", "decode", 8, 1), ("kv_bytes", "KV MiB", 7, 1)]
    lines = ["mode        " + "".join(f"{h:>{w}}" for _, h, w, _ in cols) + "  warm-up"]
    for mode, m in report["modes"].items():
        row = f"{mode:<12}"
        for key, _, w, prec in cols:
            v = m[key] / 2**20 if key == "kv_bytes" else m[key]
            row += f"{v:>{w}.{prec}f}"
        lines.append(row + f"  {m['warmup_frames']:>7}")
    lines.append("(times in ms: median per frame; phases of the measured frames)")
    for name, r in report.get("ratios", {}).items():
        lines.append(f"{name:<20} action_hz x{r['action_hz']:.2f}   lang_tokens_per_s x{r['lang_tokens_per_s']:.2f}")
    if "exactness" in report:
        e = report["exactness"]
        lines.append(f"exactness (oxygen vs sequential): {e['requests_compared']} requests compared, "
                     f"{e['text_mismatched_requests']} text mismatches, "
                     f"max action |diff| {e['max_action_abs_diff']:.2e}")
    return "\n".join(lines)
