#!/usr/bin/env python3
"""Fused vs eager action sampling, A/B in one process: two oxygen engines on one model
(EngineConfig.fused on / off), rounds of frames interleaved, same frames and noise.

    .venv/bin/python scripts/fused_ab.py --model smol --rounds 8 [--steps-per-frame 1]

Prints each engine's median phases, the per-round on / off frame-time ratio (median and
range), and whether actions and texts are identical.
"""
import argparse
import sys
from dataclasses import replace


from oxygen_ros.engine import native
from oxygen_ros.engine.bench import runner as R
from oxygen_ros.engine.registry import load_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--workload", default="libero")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--frames-per-round", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--steps-per-frame", type=int, default=1)
    a = ap.parse_args()
    print(f"fused action path: {native.status()}", file=sys.stderr)
    model, tok = load_model(a.model)
    on = R.BenchSettings(workload=a.workload, modes=("oxygen",), tokens=a.tokens,
                         steps_per_frame=a.steps_per_frame, fused=True)
    ab = R.interleaved_ab(model, tok, {"off": replace(on, fused=False), "on": on}, a.rounds, a.frames_per_round)
    print(R.format_ab(ab))
    return 0 if ab["same_actions"] and ab["same_texts"] else 1

if __name__ == "__main__":
    sys.exit(main())
