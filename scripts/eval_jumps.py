#!/usr/bin/env python3
"""Chunk switches over whole `oxygen eval` runs (issue 41's RTC off vs guided): every
episode's bag replayed as the report does (tools/bag_summary.py), its switches pooled per
run, then median / p95 / max of
- the plan's position and velocity jumps (tools/trajectory_executor.py's BoundaryJump: how far
  the new chunk departs from the old one at the switch, rad; the commanded velocity's step, rad/s),
- the arm's, on the recorded joint states (tools/arm_motion.py: the velocity change over 0.1 s
  either side of the switch, rad/s, and the departure from the old course, rad),
beside each run's success from its eval.json.

  .venv/bin/python scripts/eval_jumps.py out/eval_policy/wall_rtc_off out/eval_policy/wall_rtc_guided [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def bags(run: Path) -> list[Path]:
    """Each episode's bag folders (one per robot) under a run's folder."""
    return sorted(p.parent for p in run.glob("episode-*/**/metadata.yaml"))


def stats(values) -> dict:
    a = np.asarray(values, float)
    if not a.size:
        return {"count": 0}
    return {"count": int(a.size), "median": float(np.median(a)), "p95": float(np.percentile(a, 95)),
            "max": float(a.max())}


def run_switches(run: Path) -> dict:
    from oxygen_ros.tools.bag_read import read_bag
    from oxygen_ros.tools.bag_summary import arm_track, boundary_jumps

    pos, vel, arm_dv, arm_dq, tracking = [], [], [], [], []
    episodes = bags(run)
    for bag in episodes:
        data = read_bag(bag)
        jumps, _ = boundary_jumps(data)
        pos += [j.position_jump for j in jumps]
        vel += [j.velocity_jump for j in jumps]
        if (arm := arm_track(data)) is not None:
            scores = arm.scores("actual")
            arm_dv += [s[1] for s in scores]
            arm_dq += [s[2] for s in scores]
            if (rms := arm.summary()["tracking_error"]["rms"]) is not None:
                tracking.append(rms)
    out = {"run": str(run), "bags": len(episodes),
           "plan_position_jump_rad": stats(pos), "plan_velocity_jump_rad_s": stats(vel),
           "arm_velocity_change_rad_s": stats(arm_dv), "arm_course_deviation_rad": stats(arm_dq),
           "tracking_rms_rad_mean": float(np.mean(tracking)) if tracking else None}
    if (path := run / "eval.json").is_file():
        result = json.loads(path.read_text())
        overall = result["overall"]
        out.update(successes=overall["successes"], episodes=overall["episodes"],
                   success_wilson95=overall["success_wilson95"], rtc=result.get("rtc"))
    return out


def _cell(s: dict) -> str:
    return f"{s['median']:.3f} / {s['p95']:.3f} / {s['max']:.3f}" if s.get("count") else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="oxygen eval output folders")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    results = []
    for run in args.runs:
        if not bags(run):
            print(f"eval_jumps: no episode bags under {run}", file=sys.stderr)
            return 2
        results.append(run_switches(run))
    print("| run | success | switches | plan position jump, rad (median / p95 / max) | plan velocity jump, rad/s "
          "| arm velocity change, rad/s | arm course deviation, rad | tracking rms, rad |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        success = f"{r['successes']}/{r['episodes']}" if "successes" in r else "-"
        tracking = f"{r['tracking_rms_rad_mean']:.4f}" if r["tracking_rms_rad_mean"] is not None else "-"
        print(f"| {r['run']} | {success} | {r['plan_position_jump_rad'].get('count', 0)} "
              f"| {_cell(r['plan_position_jump_rad'])} | {_cell(r['plan_velocity_jump_rad_s'])} "
              f"| {_cell(r['arm_velocity_change_rad_s'])} | {_cell(r['arm_course_deviation_rad'])} | {tracking} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
