"""N robots served by one fleet engine vs by N separate engines, side by side in one run.

"separate" is what N nodes on one accelerator amount to: one engine per robot (its own
KV pool, the same weights), stepped one after another each control period; a robot's
chunk is ready once the robots before it in that period and its own act() are done.
"fleet" is one FleetEngine: one batched prefill and action sampling for all N robots,
then one decode batch over every robot's requests. Both see the same observations,
noises and requests (each robot its own synthetic frames, one new language request per
robot per frame); the two run in interleaved rounds, so the machine's noise lands on
both alike. Exactness: each robot's chunks and texts in the fleet equal its own engine's.
"""
from __future__ import annotations

import math
import statistics
import sys
import time

import numpy as np

from ..fleet import FleetEngine
from ..requests import LanguageRequest
from ..scheduler import EngineConfig, OxygenEngine
from .runner import BENCH_PROMPT, BenchSettings, bench_inputs, round_sizes, warmup_frames, workload_shape


class _Side:
    """One side's engines and what its frames produced, per robot."""

    def __init__(self, robots: int):
        self.actions = [[] for _ in range(robots)]
        self.order = [[] for _ in range(robots)]          # request ids in submission order
        self.texts: list[dict] = [{} for _ in range(robots)]
        self.latency_ms: list[float] = []                 # per robot chunk, from the period's start
        self.wall_s = 0.0
        self.frames = 0
        self.tokens = 0
        self.rounds: list[dict] = []

    def metrics(self, robots: int, horizon: int) -> dict:
        return {"chunk_hz_per_robot": self.frames / self.wall_s if self.wall_s else 0.0,
                "action_hz_per_robot": horizon * self.frames / self.wall_s if self.wall_s else 0.0,
                "chunk_latency_ms_p50": statistics.median(self.latency_ms),
                "chunk_latency_ms_p95": float(np.percentile(self.latency_ms, 95)),
                "tokens_per_s": self.tokens / self.wall_s if self.wall_s else 0.0,
                "frames_per_robot": self.frames, "robots": robots}


class FleetComparison:
    def __init__(self, model, tok, s: BenchSettings, robots: int):
        self.model, self.s, self.n = model, s, robots
        shape = workload_shape(model, tok, s, 4)
        slot = shape["prefix_len"] + max(shape["prompt_len"] + s.tokens, model.cfg.expert.horizon)
        per_robot = math.ceil(s.tokens / s.steps_per_frame) + 2
        base = dict(max_len=slot, max_new_tokens=s.tokens, steps_per_frame=s.steps_per_frame, seed=s.seed,
                    fused=s.fused)
        self.warm = warmup_frames("oxygen", s)
        count = self.warm + s.frames + 1
        self.inputs = [bench_inputs(model, BenchSettings(**{**vars(s), "seed": s.seed + 17 * r}), count)
                       for r in range(robots)]
        self.separate = [OxygenEngine(model, tok, EngineConfig(max_requests=per_robot, **base))
                         for _ in range(robots)]
        self.fleet = FleetEngine(model, tok, EngineConfig(max_requests=per_robot * robots, **base), robots)
        self.sides = {"fleet": _Side(robots), "separate": _Side(robots)}
        self.f = {"fleet": 0, "separate": 0}

    def _request(self):
        return LanguageRequest(BENCH_PROMPT, "narration", self.s.tokens, ignore_eos=True)

    def _frame(self, name: str, measured: bool) -> None:
        side, f = self.sides[name], self.f[name]
        t0 = time.perf_counter()
        tokens = 0
        if name == "separate":
            for r, engine in enumerate(self.separate):
                frames, noises = self.inputs[r]
                side.order[r].append(engine.submit(self._request()))
                chunk = engine.act(frames[f], noises[f])
                ready = time.perf_counter()
                res = engine.talk()
                side.actions[r].append(chunk.actions)
                if measured:
                    side.latency_ms.append((ready - t0) * 1e3)
                tokens += res.tokens_emitted
                for d in res.finished:
                    side.texts[r][d.request_id] = d.full_text
        else:
            for r in range(self.n):
                side.order[r].append(self.fleet.submit(r, self._request()))
            chunks = self.fleet.act({r: self.inputs[r][0][f] for r in range(self.n)},
                                    noises={r: self.inputs[r][1][f] for r in range(self.n)})
            ready = time.perf_counter()
            results = self.fleet.talk()
            for r in range(self.n):
                side.actions[r].append(chunks[r].actions)
                if measured:     # the batch hands every chunk out at once
                    side.latency_ms.append((ready - t0) * 1e3)
            for r, res in results.items():
                tokens += res.tokens_emitted
                for d in res.finished:
                    side.texts[r][d.request_id] = d.full_text
        self.f[name] += 1
        if measured:
            side.wall_s += time.perf_counter() - t0
            side.frames += 1
            side.tokens += tokens

    def run(self, log=print) -> dict:
        for name in self.sides:
            for _ in range(self.warm):
                self._frame(name, measured=False)
        names = list(self.sides)
        for i, n in enumerate(round_sizes(self.s.frames, self.s.rounds)):
            for name in names[i % 2:] + names[: i % 2]:        # rotate who goes first
                side = self.sides[name]
                wall, frames = side.wall_s, side.frames
                for _ in range(n):
                    self._frame(name, measured=True)
                side.rounds.append({"frames": side.frames - frames, "wall_s": side.wall_s - wall})
            log(f"  {self.n} robot(s), round {i + 1}: " + ", ".join(
                f"{m} {self.sides[m].rounds[-1]['frames'] / self.sides[m].rounds[-1]['wall_s']:.2f} chunks/s per robot"
                for m in names), file=sys.stderr)
        self._drain()
        horizon = self.model.cfg.expert.horizon
        out = {name: side.metrics(self.n, horizon) for name, side in self.sides.items()}
        ratios = [(f["frames"] / f["wall_s"]) / (s["frames"] / s["wall_s"])
                  for f, s in zip(self.sides["fleet"].rounds, self.sides["separate"].rounds)]
        out["chunk_hz_ratio_median"] = statistics.median(ratios)
        out["chunk_hz_ratio_spread"] = [min(ratios), max(ratios)]
        out["exactness"] = self._exactness()
        return out

    def _drain(self) -> None:
        """Unmeasured frames until every request has finished on both sides."""
        while self.fleet.busy() or any(e.live or e.pending for e in self.separate):
            for name in self.sides:
                f = self.f[name] % len(self.inputs[0][0])
                if name == "fleet":
                    self.fleet.act({r: self.inputs[r][0][f] for r in range(self.n)},
                                   noises={r: self.inputs[r][1][f] for r in range(self.n)})
                    for r, res in self.fleet.talk().items():
                        for d in res.finished:
                            self.sides[name].texts[r][d.request_id] = d.full_text
                else:
                    for r, engine in enumerate(self.separate):
                        res = engine.step(self.inputs[r][0][f], self.inputs[r][1][f])
                        for d in res.finished:
                            self.sides[name].texts[r][d.request_id] = d.full_text
                self.f[name] += 1

    def _exactness(self) -> dict:
        fleet, separate = self.sides["fleet"], self.sides["separate"]
        compared = mismatched = 0
        diff = 0.0
        for r in range(self.n):
            for a, b in zip(fleet.order[r], separate.order[r]):
                ta, tb = fleet.texts[r].get(a), separate.texts[r].get(b)
                if ta is not None and tb is not None:
                    compared += 1
                    mismatched += ta != tb
            for a, b in zip(fleet.actions[r], separate.actions[r]):
                diff = max(diff, float(np.abs(a - b).max()))
        return {"requests_compared": compared, "text_mismatched_requests": mismatched,
                "max_action_abs_diff": diff}


def run_fleet_bench(model, tok, s: BenchSettings, counts=(1, 2, 4), log=print) -> dict:
    """{"robots": {N: {"fleet": ..., "separate": ..., "exactness": ...}}} for each N."""
    report = {"settings": vars(s) | {"modes": list(s.modes)}, "model": model.cfg.name, "robots": {}}
    for n in counts:
        if n < 1:
            raise ValueError(f"robot counts must be >= 1, got {n}")
        log(f"{n} robot(s): warming up...", file=sys.stderr)
        report["robots"][str(n)] = FleetComparison(model, tok, s, n).run(log)
    return report


def format_fleet(report: dict) -> str:
    lines = ["robots  side       chunks/s/robot  chunk p50 ms  chunk p95 ms    tok/s"]
    for n, r in report["robots"].items():
        for side in ("separate", "fleet"):
            m = r[side]
            lines.append(f"{n:>6}  {side:<9} {m['chunk_hz_per_robot']:>15.2f} {m['chunk_latency_ms_p50']:>13.1f} "
                         f"{m['chunk_latency_ms_p95']:>13.1f} {m['tokens_per_s']:>8.1f}")
        lo, hi = r["chunk_hz_ratio_spread"]
        e = r["exactness"]
        lines.append(f"        fleet/separate chunk rate x{r['chunk_hz_ratio_median']:.2f} [{lo:.2f}-{hi:.2f}]; "
                     f"exactness: {e['requests_compared']} requests, {e['text_mismatched_requests']} text "
                     f"mismatches, max action |diff| {e['max_action_abs_diff']:.1e}")
    return "\n".join(lines)
