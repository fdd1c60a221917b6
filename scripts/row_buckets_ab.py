#!/usr/bin/env python3
"""How long products are padded, A/B in one process: the oxygen frame with the last row tile
padded to a quarter of its octave (A: 33 -> 40 rows, 174 -> 192) against the engine's
eighths (B: 33 -> 36, 174 -> 176), rounds interleaved on one model, same frames and noise.

    .venv/bin/python scripts/row_buckets_ab.py --model smol --rounds 6

Prints each side's median phases, the per-round B / A frame-time ratio, and whether actions
and texts are identical (padding rows must not change any other row's result).
"""
import argparse
import statistics
import sys

from oxygen_ros.engine.bench import runner as R
from oxygen_ros.engine.layers import blocks
from oxygen_ros.engine.registry import load_model

EIGHTHS = blocks._row_bucket


def quarters(rows: int) -> int:
    """The buckets before: rows rounded up to the next quarter of its octave."""
    step = 1 << (rows.bit_length() - 3)
    return -(-rows // step) * step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smol")
    ap.add_argument("--workload", default="libero")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--frames-per-round", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--steps-per-frame", type=int, default=1)
    a = ap.parse_args()
    model, tok = load_model(a.model)
    settings = R.BenchSettings(workload=a.workload, modes=("oxygen",), tokens=a.tokens,
                               steps_per_frame=a.steps_per_frame)
    n = R.warmup_frames("oxygen", settings) + a.rounds * a.frames_per_round + 1
    frames, noises = R.bench_inputs(model, settings, n)
    rules = {"A": quarters, "B": EIGHTHS}
    runs = {k: R.ModeRun("oxygen", model, tok, settings, frames, noises) for k in rules}
    for k, run in runs.items():
        blocks._row_bucket = rules[k]
        run.warm_up()
    for i in range(a.rounds):
        for k in (("A", "B") if i % 2 else ("B", "A")):
            blocks._row_bucket = rules[k]
            runs[k].run_round(a.frames_per_round)
    blocks._row_bucket = EIGHTHS
    for run in runs.values():
        run.finish()
    for k, run in runs.items():
        m = run.metrics()
        print(f"{k} ({'quarters' if k == 'A' else 'eighths '}) frame {m['frame_ms_median']:7.1f} ms  prefill {m['prefill_ms']:6.1f}  "
              f"admit {m['admit_ms']:6.1f}  action {m['action_ms']:6.1f}  decode {m['decode_ms']:6.1f}")
    ratios = [x["action_hz"] / y["action_hz"] for x, y in zip(runs["A"].rounds, runs["B"].rounds)]
    print(f"B / A frame time per round: x{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
    same_actions = all((x == y).all() for x, y in zip(runs["A"].actions, runs["B"].actions))
    same_texts = sorted(runs["A"].texts.values()) == sorted(runs["B"].texts.values())
    print(f"identical A vs B: actions {same_actions}, texts {same_texts}")
    return 0 if same_actions and same_texts else 1


if __name__ == "__main__":
    sys.exit(main())
