#!/usr/bin/env python3
"""An MLP over a long input, A/B in one process: through `tiled_rows` (B: the input padded
and split once, the output joined once) against each product padding its own input and
joining its own tiles (A), over all of a model's backbone and vision MLPs, interleaved.

    .venv/bin/python scripts/mlp_tiles_ab.py --model pi05-quarter [--rows 598] [--reps 15]

Checks the two give identical outputs, then prints each side's median time and B / A.
"""
import argparse
import statistics
import time

import torch

from oxygen_ros.engine.layers.blocks import GatedMLP
from oxygen_ros.engine.models.pi05.vision import VisionMLP
from oxygen_ros.engine.registry import load_model


def timed_ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pi05-quarter")
    ap.add_argument("--rows", type=int, default=598, help="rows of the backbone's input (pi05-quarter's LIBERO prefix: 598)")
    ap.add_argument("--vision-rows", type=int, default=512, help="rows of the vision MLPs' input (two cameras of 256 patches)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model)
    groups = {
        "backbone": [m for n, m in model.named_modules() if n.startswith("backbone.") and isinstance(m, GatedMLP)],
        "vision": [m for n, m in model.named_modules() if isinstance(m, VisionMLP)],
    }
    with torch.inference_mode():
        for name, mlps in groups.items():
            if not mlps:
                continue
            rows = args.rows if name == "backbone" else args.vision_rows
            first = mlps[0].gate_proj if name == "backbone" else mlps[0].fc1
            x = torch.randn(rows, first.in_features)
            if not all(torch.equal(m(x), m._rows(x)) for m in mlps):
                raise SystemExit(f"{name}: tiled_rows changed an output")
            a = lambda: [m._rows(x) for m in mlps]          # noqa: E731
            b = lambda: [m(x) for m in mlps]                # noqa: E731
            a(), b()                                        # warm-up: oneDNN's primitives
            ta, tb = [], []
            for _ in range(args.reps):                      # interleaved: the machine's noise hits both
                ta.append(timed_ms(a))
                tb.append(timed_ms(b))
            ma, mb = statistics.median(ta), statistics.median(tb)
            print(f"{name}: {len(mlps)} MLPs on {rows} rows, outputs identical; "
                  f"A (each product pads) {ma:.1f} ms, B (tiled_rows) {mb:.1f} ms, B / A {mb / ma:.3f}")


if __name__ == "__main__":
    main()
