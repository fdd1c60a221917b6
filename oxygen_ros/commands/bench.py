"""`oxygen bench`: measure the execution modes side by side on one model."""
import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="model profile (tiny, smol, pi05-quarter, pi05)")
    p.add_argument("--checkpoint", help="checkpoint path for pi05 profiles")
    p.add_argument("--workload", default="libero", help="libero, droid or aloha")
    p.add_argument("--modes", default="sequential,shared,oxygen,parallel",
                   help="comma-separated: sequential, shared, oxygen, parallel")
    p.add_argument("--frames", type=int, default=40, help="measured frames per mode")
    p.add_argument("--tokens", type=int, default=30, help="tokens per language request")
    p.add_argument("--steps-per-frame", type=int, default=1, help="decode steps k per frame")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write the full report as JSON here")


def run(args: argparse.Namespace) -> int:
    import torch

    from oxygen_ros.engine.bench import MODES, BenchSettings, format_table, run_bench
    from oxygen_ros.engine.loading import load_model

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        print(f"oxygen bench: unknown mode(s) {bad}; choose from {', '.join(MODES)}", file=sys.stderr)
        return 2
    if args.frames < 1 or args.tokens < 1 or args.steps_per_frame < 1:
        print("oxygen bench: --frames, --tokens and --steps-per-frame must be >= 1", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"loading model {args.model}...", file=sys.stderr)
    model, tok = load_model(args.model, checkpoint=args.checkpoint)
    settings = BenchSettings(workload=args.workload, modes=modes, frames=args.frames,
                             tokens=args.tokens, steps_per_frame=args.steps_per_frame, seed=args.seed)
    report = run_bench(model, tok, settings)
    report["torch_threads"] = torch.get_num_threads()
    print(format_table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
