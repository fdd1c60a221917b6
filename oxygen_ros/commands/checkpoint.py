"""`oxygen checkpoint DIR`: what the node would read from a pi0.5 checkpoint, without
loading its weights: layout and sizes from the safetensors header, then the policy I/O
(convention, statistics and their files, prompt format, action dims, horizon).
Exits 1 with the reason when something required is missing."""

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint directory (model.safetensors + config.json + statistics)")
    p.add_argument("--convention", default="auto", choices=["auto", "openpi", "lerobot"])
    p.add_argument("--asset-id", default=None, help="openpi asset folder under assets/")
    p.add_argument("--normalization", default=None, choices=["quantile", "mean_std", "none"])
    p.add_argument("--norm-stats", default=None, metavar="FILE",
                   help="statistics file instead of the checkpoint's (norm_stats.json or .safetensors)")
    p.add_argument("--action-dims", type=int, default=None)
    p.add_argument("--model", default="pi05", help="profile the weights must fit (pi05 | pi05-quarter)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")


def run(args: argparse.Namespace) -> int:
    from ..engine.config import get_config
    from ..engine.policy_io import PolicyIOError, load_policy_io
    from ..engine.weights.pi05 import CheckpointError, inspect_checkpoint

    report, failures = {}, []
    try:
        report["weights"] = inspect_checkpoint(get_config(args.model), args.checkpoint)
        failures += report["weights"]["problems"]
    except (CheckpointError, OSError, ValueError) as e:
        failures.append(f"weights: {e}")
    try:
        io = load_policy_io(args.checkpoint, args.convention, asset_id=args.asset_id,
                            normalization=args.normalization, action_dims=args.action_dims,
                            stats_path=args.norm_stats)
        report["policy_io"] = io.summary()
        report["policy_io"]["prompt_format"] = (
            "Task: {task}, State: {bins};\\nAction: " if io.state_in_prompt else "{task}\\n (no state)")
    except PolicyIOError as e:
        failures.append(f"policy I/O: {e}")
    report["ok"], report["problems"] = not failures, failures
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for part in ("weights", "policy_io"):
            for key, value in report.get(part, {}).items():
                if key != "problems":
                    print(f"{part + '.' + key:32s} {value}")
        print("ok: the node can load this checkpoint" if not failures else "NOT USABLE:")
    for problem in failures:
        print(f"  - {problem}", file=sys.stderr)
    return 0 if not failures else 1
