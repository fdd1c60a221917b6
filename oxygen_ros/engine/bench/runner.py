"""Side-by-side benchmark of the execution modes on one model, in one run.

Every mode sees the same observations, noise and requests (one new fixed-length
language request per frame). All engines are built up front and warmed up until each
pipeline holds its full batch; then the modes run in interleaved rounds of a few frames
each, in rotation, so whatever else the machine does lands on every mode alike. Each
round gives a ratio per mode; the table shows the median ratio over the rounds and its
spread. Exactness compares oxygen with sequential (isolated) execution.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from .baselines import ParallelEngine, SequentialEngine, SharedEngine
from ..frame import PHASES
from ..layers.engine_model import EngineModel
from ..requests import LanguageRequest
from ..scheduler import EngineConfig, OxygenEngine
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
    rounds: int = 8          # measured frames split into this many interleaved rounds per mode
    fused: bool = True       # native fused action sampling where built (EngineConfig.fused)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def warmup_frames(mode: str, s: BenchSettings) -> int:
    if mode == "oxygen":
        return math.ceil(s.tokens / s.steps_per_frame) + s.extra_warmup
    return s.extra_warmup


class ModeRun:
    """One mode's engine, advanced a round at a time, with what its frames produced."""

    def __init__(self, mode: str, model: EngineModel, tok, s: BenchSettings, frames, noises):
        shape = workload_shape(model, tok, s, len(frames))
        # slots sized to the workload: prefix + (prompt + tokens, or the action chunk)
        experts = [model.cfg.expert, *(e.cfg for e in model.cfg.extra_experts)]
        slot = shape["prefix_len"] + max(shape["prompt_len"] + s.tokens, *(e.tokens for e in experts))
        cfg = EngineConfig(max_requests=math.ceil(s.tokens / s.steps_per_frame) + 2, max_len=slot,
                           max_new_tokens=max(s.tokens, 1), steps_per_frame=s.steps_per_frame,
                           seed=s.seed, fused=s.fused)
        self.mode, self.model, self.s = mode, model, s
        self.frames, self.noises = frames, noises
        self.engine = MODES[mode](model, tok, cfg)
        self.warm = warmup_frames(mode, s)
        self.f = 0
        self.texts: dict[int, str] = {}
        self.order: list[int] = []
        self.actions: list[np.ndarray] = []
        self.timings: list[dict] = []
        self.rounds: list[dict] = []          # per measured round: frames, wall_s, tokens
        self.peak = 0
        self._pause()

    def _pause(self) -> None:
        if isinstance(self.engine, ParallelEngine):
            self.engine.pause()               # its language worker only runs in its own rounds

    def _frame(self):
        s, f = self.s, self.f
        self.order.append(self.engine.submit(LanguageRequest(BENCH_PROMPT, "narration", s.tokens,
                                                             ignore_eos=True)))
        res = self.engine.step(self.frames[f], self.noises[f])
        self.f += 1
        # every expert's chunk, flattened: exactness covers them all
        self.actions.append(np.concatenate([res.actions.ravel(), *(a.ravel() for a in res.expert_actions.values())]))
        for d in res.finished:
            self.texts[d.request_id] = d.full_text
        return res

    def warm_up(self) -> None:
        if isinstance(self.engine, ParallelEngine):
            self.engine.resume()
        for _ in range(self.warm):
            self._frame()
        self._pause()

    def run_round(self, n: int) -> None:
        if isinstance(self.engine, ParallelEngine):
            self.engine.resume()
        tokens = 0
        t0 = time.perf_counter()
        for _ in range(n):
            res = self._frame()
            self.timings.append(res.timings_ms)
            tokens += res.tokens_emitted
        wall = time.perf_counter() - t0
        self._pause()
        self.peak = max(self.peak, rss_bytes())
        horizon = self.model.cfg.expert.horizon
        self.rounds.append({"frames": n, "wall_s": wall, "tokens": tokens,
                            "action_hz": horizon * n / wall, "lang_tokens_per_s": tokens / wall})

    def finish(self) -> None:
        """Drain (unmeasured) so every request can be compared; stop the parallel worker."""
        try:
            while self.mode in ("oxygen", "shared") and (self.engine.live or self.engine.pending):
                res = self.engine.step(self.frames[self.f % len(self.frames)],
                                       self.noises[self.f % len(self.noises)])
                self.f += 1
                for d in res.finished:
                    self.texts[d.request_id] = d.full_text
        finally:
            if isinstance(self.engine, ParallelEngine):
                self.engine.close()

    def metrics(self) -> dict:
        wall = sum(r["wall_s"] for r in self.rounds)
        frames = sum(r["frames"] for r in self.rounds)
        med = {p: statistics.median(t[p] for t in self.timings) for p in PHASES}
        totals = [t["total"] for t in self.timings]
        # when the chunk could be published, from the frame's start (each mode's own schedule)
        chunks = [t["chunk"] for t in self.timings]
        kv = getattr(self.engine, "pool", None)
        kv_bytes = kv.bytes_total if kv is not None else 0
        return {
            "warmup_frames": self.warm,
            "action_hz": self.model.cfg.expert.horizon * frames / wall,
            "lang_tokens_per_s": sum(r["tokens"] for r in self.rounds) / wall,
            "frame_ms_median": statistics.median(totals),
            "frame_ms_p95": float(np.percentile(totals, 95)),
            "chunk_ms_median": statistics.median(chunks),
            "chunk_ms_p95": float(np.percentile(chunks, 95)),
            **{f"{p}_ms": med[p] for p in PHASES},
            "peak_rss_bytes": self.peak,
            "kv_bytes": kv_bytes,
            "kv_fraction_of_weights": kv_bytes / self.model.weight_bytes(),
        }


def interleaved_ab(model: EngineModel, tok, settings: dict[str, BenchSettings], rounds: int,
                   frames_per_round: int, before=lambda key: None) -> dict:
    """Two oxygen engines on one model, A/B in one process: the same frames and noise, rounds
    alternating which side goes first, `before(key)` ahead of each side's frames (to switch
    what the engines do not hold themselves). Per side: its ModeRun (finished); the per-round
    frame-time ratio second / first; whether actions and texts are identical."""
    a, b = settings
    n = warmup_frames("oxygen", settings[a]) + rounds * frames_per_round + 1
    frames, noises = bench_inputs(model, settings[a], n)
    runs = {k: ModeRun("oxygen", model, tok, st, frames, noises) for k, st in settings.items()}
    for k, run in runs.items():
        before(k)
        run.warm_up()
    for i in range(rounds):
        for k in ((a, b) if i % 2 else (b, a)):
            before(k)
            runs[k].run_round(frames_per_round)
    for run in runs.values():
        run.finish()
    ratios = [x["action_hz"] / y["action_hz"] for x, y in zip(runs[a].rounds, runs[b].rounds)]
    return {"runs": runs, "ratio": (statistics.median(ratios), min(ratios), max(ratios)),
            "same_actions": all((x == y).all() for x, y in zip(runs[a].actions, runs[b].actions)),
            "same_texts": sorted(runs[a].texts.values()) == sorted(runs[b].texts.values())}


def format_ab(ab: dict) -> str:
    """interleaved_ab's report: each side's median phases, the per-round ratio, identity."""
    (a, ra), (b, rb) = ab["runs"].items()
    lines = []
    for k, run in ((a, ra), (b, rb)):
        m = run.metrics()
        lines.append(f"{k:<8}  frame {m['frame_ms_median']:7.1f} ms" + "".join(
            f"  {p} {m[p + '_ms']:6.1f}" for p in PHASES) + f"  act/s {m['action_hz']:.2f}")
    med, lo, hi = ab["ratio"]
    lines.append(f"{b} / {a} frame time per round: x{med:.3f} [{lo:.3f}-{hi:.3f}]")
    lines.append(f"identical {b} vs {a}: actions {ab['same_actions']}, texts {ab['same_texts']}")
    return "\n".join(lines)


def round_sizes(frames: int, rounds: int) -> list[int]:
    """`frames` split into `rounds` (at most `frames`) nearly equal rounds."""
    rounds = max(1, min(rounds, frames))
    return [frames // rounds + (1 if i < frames % rounds else 0) for i in range(rounds)]


def bench_inputs(model: EngineModel, s: BenchSettings, count: int) -> tuple[list, list]:
    """`count` deterministic observations of the workload and one action noise for each."""
    frames = synthetic_frames(get_workload(s.workload), model.cfg.camera_slots, model.cfg.vision.image_size,
                              count, s.seed)
    gen = torch.Generator().manual_seed(s.seed + 1)
    e = model.cfg.expert
    return frames, [torch.randn(e.horizon, e.action_dim, generator=gen) for _ in frames]


def run_bench(model: EngineModel, tok, s: BenchSettings, log=print) -> dict:
    frames, noises = bench_inputs(model, s, max(warmup_frames(m, s) for m in s.modes) + s.frames + 1)
    runs = {mode: ModeRun(mode, model, tok, s, frames, noises) for mode in s.modes}
    try:
        for mode, run in runs.items():
            log(f"warming up {mode} ({run.warm} frames)...", file=sys.stderr)
            run.warm_up()
        sizes = round_sizes(s.frames, s.rounds)
        modes = list(s.modes)
        for i, n in enumerate(sizes):
            order = modes[i % len(modes):] + modes[: i % len(modes)]    # rotate who goes first
            for mode in order:
                runs[mode].run_round(n)
            log(f"round {i + 1}/{len(sizes)} ({n} frames per mode): " + ", ".join(
                f"{m} {runs[m].rounds[-1]['action_hz']:.1f} act/s" for m in modes), file=sys.stderr)
    finally:
        for run in runs.values():
            run.finish()
    report = {"settings": vars(s) | {"modes": list(s.modes)}, "model": model.cfg.name,
              "modes": {m: r.metrics() for m, r in runs.items()},
              "rounds": {m: r.rounds for m, r in runs.items()}}
    base = runs.get("sequential")
    if base:
        report["round_ratios"], report["ratios"], report["ratio_spread"] = {}, {}, {}
        for m, run in runs.items():
            if m == "sequential":
                continue
            name = f"{m}/sequential"
            per_round = {k: [r[k] / b[k] for r, b in zip(run.rounds, base.rounds)]
                         for k in ("action_hz", "lang_tokens_per_s")}
            report["round_ratios"][name] = per_round
            report["ratios"][name] = {k: statistics.median(v) for k, v in per_round.items()}
            report["ratio_spread"][name] = {k: [min(v), max(v)] for k, v in per_round.items()}
    if base and "oxygen" in runs:
        report["exactness"] = exactness(runs["oxygen"], base)
    return report


def exactness(run: ModeRun, reference: ModeRun) -> dict:
    texts = [run.texts.get(r) for r in run.order]
    ref_texts = [reference.texts.get(r) for r in reference.order]
    pairs = [(a, b) for a, b in zip(texts, ref_texts) if a is not None and b is not None]
    n = min(len(run.actions), len(reference.actions))
    diff = max(float(np.abs(run.actions[i] - reference.actions[i]).max()) for i in range(n))
    return {"requests_compared": len(pairs),
            "text_mismatched_requests": sum(a != b for a, b in pairs),
            "max_action_abs_diff": diff}


def format_table(report: dict) -> str:
    cols = [("action_hz", "act/s", 8, 1), ("lang_tokens_per_s", "tok/s", 8, 1),
            ("frame_ms_median", "frame", 8, 1), ("frame_ms_p95", "p95", 8, 1),
            ("chunk_ms_median", "chunk", 8, 1), ("chunk_ms_p95", "p95", 8, 1),
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
    lines.append("(times in ms: median per frame; chunk: from the frame's start to the action chunk "
                 "being ready to publish, the mode's own schedule; phases of the measured frames)")
    rounds = len(next(iter(report["rounds"].values()), []))
    if report.get("ratios"):
        lines.append(f"ratios: median over {rounds} interleaved rounds [min - max]")
    for name, r in report.get("ratios", {}).items():
        lo, hi = (report["ratio_spread"][name][k] for k in ("action_hz", "lang_tokens_per_s"))
        lines.append(f"{name:<20} action_hz x{r['action_hz']:.2f} [{lo[0]:.2f}-{lo[1]:.2f}]   "
                     f"lang_tokens_per_s x{r['lang_tokens_per_s']:.2f} [{hi[0]:.2f}-{hi[1]:.2f}]")
    if "exactness" in report:
        e = report["exactness"]
        lines.append(f"exactness (oxygen vs sequential): {e['requests_compared']} requests compared, "
                     f"{e['text_mismatched_requests']} text mismatches, "
                     f"max action |diff| {e['max_action_abs_diff']:.2e}")
    return "\n".join(lines)


# -- roofline --------------------------------------------------------------------------
def workload_shape(model: EngineModel, tok, s: BenchSettings, frames: int = 64) -> dict:
    """Token counts of the workload: the longest prefix over its first frames (the state
    text varies per frame) and the request prompt."""
    from ..observation.observation import prefix_text
    wl = get_workload(s.workload)
    cams = min(wl.cameras, len(model.cfg.camera_slots))
    text = max(len(tok.encode(prefix_text(f.instruction, f.state), add_bos=True))
               for f in synthetic_frames(wl, model.cfg.camera_slots, 8, frames, s.seed))
    return {"cameras": cams, "prefix_len": cams * model.cfg.vision.tokens_per_image + text,
            "prompt_len": len(tok.encode(BENCH_PROMPT))}


def roofline_phases(costs, shape: dict, mode: str, s: BenchSettings, seconds) -> dict[str, float]:
    """ms per phase for one steady-state frame of `mode` (one request per frame).
    costs: FrameCosts (with seconds = its roofline time) or KernelFloor (seconds = identity)."""
    lp, tp, n, k = shape["prefix_len"], shape["prompt_len"], s.tokens, s.steps_per_frame
    copies = 2 if mode == "sequential" else 1       # isolated execution prefills twice
    ctx0 = lp + tp
    if mode in ("sequential", "shared"):
        decode = sum(seconds(costs.decode_step([ctx0 + j])) for j in range(n - 1))
    elif mode == "oxygen":
        batch = max(1, math.ceil((n - 1) / k))
        steps = min(k, n - 1)
        decode = steps * seconds(costs.decode_step([ctx0 + (n - 1) // 2] * batch))
    else:   # parallel: language runs beside the frame on another worker
        decode, copies = 0.0, 1
    admit = seconds(costs.admit(lp, tp)) if mode != "parallel" else 0.0
    return {"vision": copies * seconds(costs.vision(shape["cameras"])) * 1e3,
            "prefill": copies * seconds(costs.prefill(lp)) * 1e3,
            "action": seconds(costs.action(lp)) * 1e3,
            "admit": admit * 1e3, "decode": decode * 1e3}


def add_roofline(report: dict, model: EngineModel, tok, s: BenchSettings, log=print) -> None:
    from .roofline import FrameCosts, KernelFloor, measure_peaks
    log("measuring this machine's peaks and the kernel floor...", file=sys.stderr)
    shape = workload_shape(model, tok, s)
    batch1_ctx = [shape["prefix_len"] + shape["prompt_len"] + s.tokens // 2]
    floor, costs = KernelFloor(model), FrameCosts(model)
    # the floor first: its passes may raise the peaks the roofline is computed from
    floors = {mode: roofline_phases(floor, shape, mode, s, lambda t: t) for mode in report["modes"]}
    floor_batch1 = floor.decode_step(batch1_ctx) * 1e3
    peaks = floor.raise_peaks(measure_peaks())
    out = {"peak_gflops": peaks.gflops, "peak_gbps": peaks.gbps, **shape, "modes": {}}
    for mode, m in report["modes"].items():
        roof, kern = roofline_phases(costs, shape, mode, s, lambda c: c.seconds(peaks)), floors[mode]
        phases = {p: {"measured_ms": m[f"{p}_ms"], "roofline_ms": roof[p], "floor_ms": kern[p],
                      "ratio": m[f"{p}_ms"] / roof[p] if roof[p] else None} for p in PHASES}
        total_roof, total_floor = sum(roof.values()), sum(kern.values())
        out["modes"][mode] = {"phases": phases, "frame_ms": m["frame_ms_median"],
                              "frame_roofline_ms": total_roof, "frame_floor_ms": total_floor,
                              "frame_ratio": m["frame_ms_median"] / total_roof,
                              "floor_ratio": total_floor / total_roof}
    if "shared" in report["modes"] and s.tokens > 1:
        step = report["modes"]["shared"]["decode_ms"] / (s.tokens - 1)
        roof = costs.decode_step(batch1_ctx).bytes / (peaks.gbps * 1e9) * 1e3
        out["decode_step_batch1"] = {"measured_ms": step, "bandwidth_roofline_ms": roof, "ratio": step / roof,
                                     "floor_ms": floor_batch1}
    report["roofline"] = out


def format_roofline(r: dict) -> str:
    lines = [f"roofline: peaks {r['peak_gflops']:.1f} GFLOP/s fp32 matmul, {r['peak_gbps']:.1f} GB/s weight streaming"
             f" (best of dedicated runs and kernel-floor passes); prefix {r['prefix_len']} tokens,"
             f" prompt {r['prompt_len']}",
             "mode        " + "".join(f"{p:>16}" for p in PHASES) + "           frame",
             "            " + "".join(f"{'meas/roof':>16}" for _ in PHASES) + "       meas/roof"]
    for mode, m in r["modes"].items():
        row = f"{mode:<12}"
        for p in PHASES:
            ph = m["phases"][p]
            row += f"{ph['measured_ms']:>7.1f}/{ph['roofline_ms']:<7.1f}" + " "
        row += f"{m['frame_ms']:>8.1f}/{m['frame_roofline_ms']:.1f} (x{m['frame_ratio']:.2f})"
        lines.append(row)
    lines.append("kernel floor (the phases' matrix products alone, back to back, same kernels), ms:")
    for mode, m in r["modes"].items():
        lines.append(f"{mode:<12}" + "".join(f"{m['phases'][p]['floor_ms']:>16.1f}" for p in PHASES)
                     + f"{m['frame_floor_ms']:>9.1f} (x{m['floor_ratio']:.2f} of roofline)")
    if "decode_step_batch1" in r:
        d = r["decode_step_batch1"]
        lines.append(f"decode step at batch 1: {d['measured_ms']:.2f} ms vs bandwidth roofline "
                     f"{d['bandwidth_roofline_ms']:.2f} ms (x{d['ratio']:.2f}); its products alone "
                     f"{d['floor_ms']:.2f} ms (x{d['floor_ms'] / d['bandwidth_roofline_ms']:.2f})")
    return "\n".join(lines)


# -- sweep -------------------------------------------------------------------------------
SWEEP_GRID = {"tokens": (5, 10, 20, 30), "steps_per_frame": (1, 5, 10, 30), "denoise_steps": (5, 10, 20)}


def run_sweep(model: EngineModel, tok, s: BenchSettings, grid=SWEEP_GRID, log=print) -> dict:
    """oxygen vs sequential over the grid; the ideal ratio is implied by measured phase costs:
    sequential's frame time over the sum of oxygen's phase medians (what oxygen would reach
    if the scheduler, cache management and Python around the model cost nothing)."""
    points = []
    original = model.cfg.expert.denoise_steps
    try:
        for denoise in grid["denoise_steps"]:
            model.set_action_schedule(denoise_steps=denoise)
            for tokens in grid["tokens"]:
                for k in grid["steps_per_frame"]:
                    if k > tokens:
                        continue
                    ps = BenchSettings(workload=s.workload, modes=("sequential", "oxygen"), frames=s.frames,
                                       tokens=tokens, steps_per_frame=k, extra_warmup=s.extra_warmup, seed=s.seed,
                                       rounds=s.rounds)
                    rep = run_bench(model, tok, ps, log=lambda *a, **kw: None)
                    seq, ox = rep["modes"]["sequential"], rep["modes"]["oxygen"]
                    phase_sum = sum(ox[f"{p}_ms"] for p in PHASES)
                    ideal = seq["frame_ms_median"] / phase_sum
                    measured = seq["frame_ms_median"] / ox["frame_ms_median"]
                    point = {"tokens": tokens, "steps_per_frame": k, "denoise_steps": denoise,
                             "ratio_action_hz": rep["ratios"]["oxygen/sequential"]["action_hz"],
                             "ratio_lang_tokens_per_s": rep["ratios"]["oxygen/sequential"]["lang_tokens_per_s"],
                             "ratio_frame_median": measured, "ideal_ratio": ideal,
                             "fraction_of_ideal": measured / ideal, **rep["exactness"]}
                    points.append(point)
                    log(f"  tokens {tokens:>2} k {k:>2} denoise {denoise:>2}: oxygen/sequential x{measured:.2f} "
                        f"(ideal x{ideal:.2f}, {100 * measured / ideal:.0f}%), "
                        f"{point['text_mismatched_requests']} mismatches", file=sys.stderr)
    finally:
        model.set_action_schedule(denoise_steps=original)
    return {"model": model.cfg.name, "workload": s.workload, "frames": s.frames, "points": points}


def plot_sweep(sweep: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = sweep["points"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [3, 1]})
    x = range(len(pts))
    ax1.plot(x, [p["ideal_ratio"] for p in pts], "o-", label="ideal (from measured phase costs)")
    ax1.plot(x, [p["ratio_frame_median"] for p in pts], "s-", label="measured")
    ax1.set_xticks(list(x))
    ax1.set_xticklabels([f"{p['tokens']}/{p['steps_per_frame']}/{p['denoise_steps']}" for p in pts],
                        rotation=90, fontsize=7)
    ax1.set_xlabel("tokens per request / decode steps per frame k / denoise steps")
    ax1.set_ylabel("oxygen / sequential (frame rate)")
    ax1.set_title(f"{sweep['model']} on {sweep['workload']}: speed-up over isolated execution")
    ax1.legend()
    ax1.grid(alpha=0.3)
    frac = [100 * p["fraction_of_ideal"] for p in pts]
    ax2.hist(frac, bins=10, color="tab:green")
    ax2.axvline(90, color="red", linestyle="--", label="90% target")
    ax2.set_xlabel("measured / ideal (%)")
    ax2.set_title("fraction of the ideal ratio")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the gain of sharing as experts are added ------------------------------------------------
def with_experts(model, count: int):
    """`model` (a Qwen3-VL VLA) with only its first `count` action experts: the same modules
    and weights, the rest left out."""
    extra = model.cfg.extra_experts
    if not 1 <= count <= 1 + len(extra):
        raise ValueError(f"{model.cfg.name} has {1 + len(extra)} action expert(s); asked for {count}")
    view = copy.copy(model)
    view.cfg = dataclasses.replace(model.cfg, extra_experts=extra[:count - 1])
    view._modules = dict(model._modules)
    view._modules["extra_experts"] = torch.nn.ModuleList(list(model.extra_experts)[:count - 1])
    return view


def run_expert_scaling(model, tok, s: BenchSettings, counts=(1, 2, 3), log=print) -> dict:
    """Sequential (each expert and each language request with its own prefill) vs oxygen
    (one shared prefill for all) with 1, 2, 3 ... experts, every (count, mode) taking its
    turn in each round. Returns per count the per-frame speed-up per round, its median
    and spread, and exactness."""
    views = {n: with_experts(model, n) for n in counts}
    frames, noises = bench_inputs(model, s, max(warmup_frames(m, s) for m in ("sequential", "oxygen")) + s.frames + 1)
    runs = {(n, mode): ModeRun(mode, views[n], tok, s, frames, noises) for n in counts
            for mode in ("sequential", "oxygen")}
    try:
        for (n, mode), run in runs.items():
            log(f"warming up {mode} with {n} expert(s) ({run.warm} frames)...", file=sys.stderr)
            run.warm_up()
        keys = list(runs)
        for i, size in enumerate(round_sizes(s.frames, s.rounds)):
            for key in keys[i % len(keys):] + keys[: i % len(keys)]:
                runs[key].run_round(size)
            ratios = [runs[(n, "sequential")].rounds[-1]["wall_s"] / runs[(n, "oxygen")].rounds[-1]["wall_s"]
                      for n in counts]
            log(f"round {i + 1}: oxygen vs sequential per frame " + ", ".join(
                f"{n} expert(s) x{r:.2f}" for n, r in zip(counts, ratios)), file=sys.stderr)
    finally:
        for run in runs.values():
            run.finish()
    out = {"settings": vars(s) | {"modes": ["sequential", "oxygen"]}, "model": model.cfg.name, "experts": {}}
    for n in counts:
        seq, ox = runs[(n, "sequential")], runs[(n, "oxygen")]
        per_round = [b["wall_s"] / b["frames"] / (a["wall_s"] / a["frames"]) for a, b in zip(ox.rounds, seq.rounds)]
        out["experts"][n] = {
            "names": ["main", *(e.name for e in views[n].cfg.extra_experts)],
            "speedup_per_frame": statistics.median(per_round), "spread": [min(per_round), max(per_round)],
            "per_round": per_round,
            "frame_ms": {"sequential": seq.metrics()["frame_ms_median"], "oxygen": ox.metrics()["frame_ms_median"]},
            "exactness": exactness(ox, seq),
        }
    return out


def format_expert_scaling(report: dict) -> str:
    lines = [f"{'experts':<9}{'sequential ms':>15}{'oxygen ms':>11}  per-frame speed-up  [min - max]  exactness"]
    for n, r in report["experts"].items():
        e = r["exactness"]
        lines.append(f"{n:<9}{r['frame_ms']['sequential']:>15.1f}{r['frame_ms']['oxygen']:>11.1f}  "
                     f"x{r['speedup_per_frame']:<18.2f}[{r['spread'][0]:.2f}-{r['spread'][1]:.2f}]  "
                     f"{e['text_mismatched_requests']} text mismatches of {e['requests_compared']}, "
                     f"action |diff| {e['max_action_abs_diff']:.1e}")
    lines.append("(frame ms: median per frame; speed-up: sequential / oxygen frame time per interleaved round)")
    return "\n".join(lines)
