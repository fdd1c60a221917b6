#!/usr/bin/env python3
"""Two training runs of the same stage side by side (does a rerun follow the shipped run's
curve?): each logged loss averaged over windows of steps, the two runs' window means and
the rerun's difference in units of the first run's spread within the window (noise), then
the evaluations both logged at the same steps.

  .venv/bin/python scripts/compare_runs.py out/train/panda_v5/stage1 out/train/repro/stage1 [--window 250]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def records(run: Path) -> tuple[dict, dict]:
    """({step: step record}, {step: its evaluations' figures merged}) from a run's log.jsonl;
    a step logged again after a resume counts as its last record."""
    steps, evals = {}, {}
    for line in (run / "log.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "step":
            steps[r["step"]] = r
        elif r.get("kind") == "eval":
            evals.setdefault(r["step"], {}).update(r)
    return steps, evals


def numbers(r: dict) -> dict:
    return {k: v for k, v in r.items() if isinstance(v, (int, float)) and k not in ("step", "time", "sec", "data_s", "frames")}


def windows(steps: dict, window: int) -> dict:
    """{(first, last step): {key: (mean, standard deviation)}} over full windows."""
    out = {}
    last = max(steps, default=0)
    for lo in range(1, last + 1, window):
        rows = [numbers(steps[s]) for s in range(lo, lo + window) if s in steps]
        if len(rows) < window:
            break
        stats = {}
        for key in rows[0]:
            vals = [r[key] for r in rows if key in r]
            mean = sum(vals) / len(vals)
            stats[key] = (mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / max(len(vals) - 1, 1)))
        out[(lo, lo + window - 1)] = stats
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first", type=Path, help="a stage's run directory (the reference)")
    ap.add_argument("second", type=Path, help="the same stage of the rerun")
    ap.add_argument("--window", type=int, default=250, help="steps per window")
    a = ap.parse_args(argv)
    (s1, e1), (s2, e2) = records(a.first), records(a.second)
    w1, w2 = windows(s1, a.window), windows(s2, a.window)
    shared = [w for w in w1 if w in w2]
    if not shared:
        print(f"compare_runs: no {a.window}-step window logged in both runs "
              f"({len(s1)} and {len(s2)} steps)", file=sys.stderr)
        return 2
    keys = [k for k in w1[shared[0]] if k in w2[shared[0]]]
    print(f"{a.first} vs {a.second}: window means, rerun - first in the first run's standard deviations")
    print("steps".ljust(12) + "".join(f"{k:>28}" for k in keys))
    for w in shared:
        cells = []
        for k in keys:
            (m1, sd1), (m2, _) = w1[w][k], w2[w][k]
            cells.append(f"{m1:9.4f} {m2:9.4f} {(m2 - m1) / sd1 if sd1 else 0.0:+7.2f}sd")
        print(f"{w[0]}-{w[1]}".ljust(12) + "".join(f"{c:>28}" for c in cells))
    both = sorted(set(e1) & set(e2))
    if both:
        print("evaluations (first / rerun):")
        for step in both:
            a1, a2 = numbers(e1[step]), numbers(e2[step])
            print(f"  step {step}: " + ", ".join(f"{k} {a1[k]:.3f} / {a2[k]:.3f}" for k in a1 if k in a2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
