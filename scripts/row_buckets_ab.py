#!/usr/bin/env python3
"""How long products are padded, A/B in one process: the oxygen frame with the last row tile
padded to a quarter of its octave (33 -> 40 rows, 174 -> 192) against the engine's
eighths (33 -> 36, 174 -> 176), rounds interleaved on one model, same frames and noise.

    .venv/bin/python scripts/row_buckets_ab.py --model smol --rounds 6

Prints each side's median phases, the per-round eighths / quarters frame-time ratio, and
whether actions and texts are identical (padding rows must not change any other row's result).
"""
import argparse
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
    rules = {"quarters": quarters, "eighths": EIGHTHS}

    def use(rule: str) -> None:
        blocks._row_bucket = rules[rule]
    try:
        ab = R.interleaved_ab(model, tok, dict.fromkeys(rules, settings), a.rounds, a.frames_per_round, before=use)
    finally:
        use("eighths")
    print(R.format_ab(ab))
    return 0 if ab["same_actions"] and ab["same_texts"] else 1

if __name__ == "__main__":
    sys.exit(main())
