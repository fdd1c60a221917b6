"""`oxygen checkpoint DIR`: what the node would read from a checkpoint, without loading
its weights. A directory whose config.json says Qwen3-VL (model_type qwen3_vl) or
Xiaomi-Robotics-0 (MiBoTForActionGeneration) gets the Qwen3-VL report (files, parts,
tensor and parameter counts, dtype, the decoder / vision / head configs, the tokenizer);
anything else is read as pi0.5: layout and sizes from the safetensors header, then the
policy I/O (convention, statistics and their files, prompt format, action dims, horizon).
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


def _qwen3vl_kind(checkpoint: str) -> str | None:
    """"qwen3_vl" / "xr0" when the checkpoint's config.json says so, else None."""
    from pathlib import Path

    from ..engine.registry import family

    d = Path(checkpoint)
    cfg = (d.parent if d.is_file() else d) / "config.json"
    try:
        return family("xr0").checkpoint_kind(json.loads(cfg.read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        return None


def run_qwen3vl(args: argparse.Namespace) -> int:
    from ..engine.registry import family

    report = family("xr0").inspect_checkpoint(args.checkpoint)
    failures = list(report["problems"])
    report["ok"] = not failures
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            if key in ("problems", "ok"):
                continue
            if key == "parts":
                for part, counts in value.items():
                    print(f"{'parts.' + part:32s} {counts}")
            elif isinstance(value, dict):
                print(f"{key:32s} " + ", ".join(f"{k}={v}" for k, v in value.items()))
            else:
                print(f"{key:32s} {value}")
        print("ok: the node can load this checkpoint" if not failures else "NOT USABLE:")
    for problem in failures:
        print(f"  - {problem}", file=sys.stderr)
    return 0 if not failures else 1


def run(args: argparse.Namespace) -> int:
    if _qwen3vl_kind(args.checkpoint) is not None:
        return run_qwen3vl(args)
    from ..engine.policy_io import PolicyIOError
    from ..engine.registry import family, get_config

    pi05 = family("pi05")

    report, failures = {}, []
    try:
        report["weights"] = pi05.inspect_checkpoint(get_config(args.model), args.checkpoint)
        failures += report["weights"]["problems"]
    except (pi05.CheckpointError, OSError, ValueError) as e:
        failures.append(f"weights: {e}")
    try:
        io = pi05.load_policy_io(args.checkpoint, args.convention, asset_id=args.asset_id,
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
