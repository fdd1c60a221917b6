#!/usr/bin/env python3
"""The scripted expert's success over seeds (physics only, no rendering), by the place rule.

    .venv/bin/python scripts/expert_success.py --seeds 900000-900049 [--json out/expert.json]

Each seed places the cube and the bowl (panda_scene.layout); the expert (tools/
scripted_expert.py) runs one episode through the simulated joint_trajectory_controller;
success = the cube in the bowl at the end (tools/cube_place.py). Prints each failure's
places, the success rate and its 95% Wilson interval.
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path


def seed_range(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=seed_range, default=seed_range("900000-900049"), help="A-B, inclusive")
    ap.add_argument("--json", help="also write the per-seed results here")
    args = ap.parse_args()

    from oxygen_ros.tools import scripted_expert as se
    from oxygen_ros.tools.panda_world import PandaWorld

    results, start = [], time.monotonic()
    for seed in args.seeds:
        with PandaWorld() as world:       # a fresh world: nothing of the last episode stays
            ep = se.rollout(world, seed)
        runs = [p for i, p in enumerate(ep.places) if i == 0 or ep.places[i - 1] != p]
        results.append({"seed": seed, "success": ep.success, "grasped": ep.grasped, "places": runs})
        if not ep.success:
            print(f"seed {seed}: FAILED, places {' -> '.join(runs)}, grasp contact {ep.grasped}", flush=True)
    k, n = sum(r["success"] for r in results), len(results)
    lo, hi = wilson(k, n)
    print(f"expert success: {k}/{n} = {100 * k / n:.1f}% (95% Wilson interval {100 * lo:.1f}-{100 * hi:.1f}%), "
          f"seeds {args.seeds[0]}-{args.seeds[-1]}, {time.monotonic() - start:.0f} s", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"success": k, "episodes": n, "wilson95": [lo, hi],
                                               "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
