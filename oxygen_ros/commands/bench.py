"""`oxygen bench`: measure the execution modes side by side on one model."""
import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="model profile (docs/models.md: tiny, smol, pi05-quarter, xr0-cpu, ...)")
    p.add_argument("--checkpoint", help="checkpoint of a profile that reads one (pi05, xr0, starvla-pi)")
    p.add_argument("--workload", default="libero", help="libero, droid or aloha")
    p.add_argument("--modes", default="sequential,shared,oxygen,parallel",
                   help="comma-separated: sequential, shared, oxygen, parallel")
    p.add_argument("--frames", type=int, default=40, help="measured frames per mode")
    p.add_argument("--rounds", type=int, default=8,
                   help="interleaved rounds the measured frames are split into (modes take turns)")
    p.add_argument("--tokens", type=int, default=30, help="tokens per language request")
    p.add_argument("--steps-per-frame", type=int, default=1, help="decode steps k per frame")
    p.add_argument("--denoise-steps", type=int, default=0, help="flow-matching steps (0 = the profile's)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fused", choices=("on", "off"), default="on",
                   help="action sampling as one native call (built by make setup; off = eager)")
    p.add_argument("--roofline", action="store_true",
                   help="measure this machine's peaks and compare every phase with its roofline time "
                        "and with its kernel floor (its matrix products alone)")
    p.add_argument("--sweep", action="store_true",
                   help="oxygen vs sequential over the grid tokens 5..30 x k 1..30 x denoise 5..20")
    p.add_argument("--plot", metavar="PNG", help="with --sweep: write the sweep plot here")
    p.add_argument("--experts", metavar="N[,N...]", default="",
                   help="the gain of sharing as action experts are added: sequential vs oxygen with the "
                        "profile's first N experts, e.g. 1,2,3 (a multi-expert profile: qwen3vl-multi-cpu)")
    p.add_argument("--robots", metavar="N[,N...]", default="",
                   help="fleet mode: N robots served by one fleet engine vs by N separate engines, e.g. 1,2,4 "
                        "(per-robot chunk rate and latency, total tokens/s, exactness per robot)")
    p.add_argument("--json", metavar="PATH", help="write the full report as JSON here")


def run(args: argparse.Namespace) -> int:
    import torch

    from oxygen_ros.engine.bench import runner as bench
    from oxygen_ros.engine.registry import load_model

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in bench.MODES]
    if bad or not modes:
        print(f"oxygen bench: unknown mode(s) {bad}; choose from {', '.join(bench.MODES)}", file=sys.stderr)
        return 2
    if min(args.frames, args.tokens, args.steps_per_frame, args.rounds) < 1 or args.denoise_steps < 0:
        print("oxygen bench: --frames, --rounds, --tokens and --steps-per-frame must be >= 1", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"loading model {args.model}...", file=sys.stderr)
    model, tok = load_model(args.model, checkpoint=args.checkpoint)
    if args.denoise_steps:
        model.set_action_schedule(denoise_steps=args.denoise_steps)
    settings = bench.BenchSettings(workload=args.workload, modes=modes, frames=args.frames,
                                   tokens=args.tokens, steps_per_frame=args.steps_per_frame, seed=args.seed,
                                   rounds=args.rounds, fused=args.fused == "on")
    from oxygen_ros.engine import native
    if settings.fused:
        print(f"fused action path: {native.status()}", file=sys.stderr)
    if args.robots:
        from oxygen_ros.engine.bench.fleet_bench import format_fleet, run_fleet_bench

        try:
            counts = tuple(int(v) for v in args.robots.split(",") if v.strip())
            report = run_fleet_bench(model, tok, settings, counts)
        except ValueError as e:
            print(f"oxygen bench: --robots: {e}", file=sys.stderr)
            return 2
        print(format_fleet(report))
    elif args.experts:
        counts = tuple(int(v) for v in args.experts.split(",") if v.strip())
        try:
            report = bench.run_expert_scaling(model, tok, settings, counts)
        except ValueError as e:
            print(f"oxygen bench: --experts: {e}", file=sys.stderr)
            return 2
        print(bench.format_expert_scaling(report))
    elif args.sweep:
        report = bench.run_sweep(model, tok, settings)
        worst = min(p["fraction_of_ideal"] for p in report["points"])
        mism = sum(p["text_mismatched_requests"] for p in report["points"])
        diff = max(p["max_action_abs_diff"] for p in report["points"])
        print(f"sweep: {len(report['points'])} points; worst fraction of ideal {100 * worst:.0f}%; "
              f"{mism} text mismatches; max action |diff| {diff:.1e}")
        if args.plot:
            bench.plot_sweep(report, args.plot)
            print(f"wrote {args.plot}", file=sys.stderr)
    else:
        report = bench.run_bench(model, tok, settings)
        print(bench.format_table(report))
        if args.roofline:
            bench.add_roofline(report, model, tok, settings)
            print(bench.format_roofline(report["roofline"]))
    report["torch_threads"] = torch.get_num_threads()
    report["fused_active"] = settings.fused and native.available()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
