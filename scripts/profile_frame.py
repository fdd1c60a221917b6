#!/usr/bin/env python3
"""Where an oxygen frame's milliseconds go, op by op (torch.profiler, CPU).

    .venv/bin/python scripts/profile_frame.py --model smol [--frames 5] [--fused on|off] [--phase decode] [--shapes]

Runs an OxyGen engine to its steady batch (the bench's warm-up), then profiles
`--frames` frames and prints, per frame, each ATen op's self time (the time spent in
the op itself, children excluded) with its call count, grouped as the matrix products
(what the kernel floor times) and everything else. The native fused sampling calls the
same ATen ops, so they show up here too.
"""
import argparse
import contextlib
import sys
from collections import defaultdict

from torch.profiler import ProfilerActivity, profile, record_function

from oxygen_ros.engine.bench import runner as R
from oxygen_ros.engine.frame import PHASES, PhaseTimer
from oxygen_ros.engine.registry import load_model

# The linear-layer products: oneDNN-blocked, MKL and plain matmuls of packed weights.
PRODUCTS = ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::linear")


TAG = "phase:"


@contextlib.contextmanager
def tagged_phases():
    """Each PhaseTimer phase runs inside record_function("phase:<name>") while profiling."""
    enter, exit_ = PhaseTimer.__enter__, PhaseTimer.__exit__

    def tagged_enter(self):
        self._tag = record_function(TAG + self._phase)
        self._tag.__enter__()
        return enter(self)

    def tagged_exit(self, *exc):
        self._tag.__exit__(*exc)
        return exit_(self, *exc)

    PhaseTimer.__enter__, PhaseTimer.__exit__ = tagged_enter, tagged_exit
    try:
        yield
    finally:
        PhaseTimer.__enter__, PhaseTimer.__exit__ = enter, exit_


def phase_of(event) -> str | None:
    while event is not None:
        if event.name.startswith(TAG):
            return event.name[len(TAG):]
        event = event.cpu_parent
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smol")
    ap.add_argument("--workload", default="libero")
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--steps-per-frame", type=int, default=1)
    ap.add_argument("--fused", choices=("on", "off"), default="on")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--phase", choices=PHASES, help="only the ops of this phase (vision, prefill, ...)")
    ap.add_argument("--shapes", action="store_true", help="one row per op and input shapes")
    a = ap.parse_args()
    model, tok = load_model(a.model)
    s = R.BenchSettings(workload=a.workload, modes=("oxygen",), tokens=a.tokens,
                        steps_per_frame=a.steps_per_frame, fused=a.fused == "on")
    n = R.warmup_frames("oxygen", s) + a.frames + 1
    frames, noises = R.bench_inputs(model, s, n)
    run = R.ModeRun("oxygen", model, tok, s, frames, noises)
    run.warm_up()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=a.shapes) as prof, tagged_phases():
        run.run_round(a.frames)
    run.finish()
    wall = sum(t["total"] for t in run.timings) / a.frames
    ops = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.name.startswith(TAG) or (a.phase and phase_of(ev) != a.phase):
            continue
        key = f"{ev.name} {ev.input_shapes}" if a.shapes else ev.name
        ops[key][0] += ev.self_cpu_time_total / 1e3 / a.frames
        ops[key][1] += 1 / a.frames
    total = sum(ms for ms, _ in ops.values())
    products = sum(ms for k, (ms, _) in ops.items() if k.split(" ")[0] in PRODUCTS)
    print(f"{a.model}, {a.workload}, {a.tokens} tokens, k={a.steps_per_frame}, fused {a.fused}: "
          f"{'phase ' + a.phase + ', ' if a.phase else ''}frame {wall:.1f} ms profiled (the profiler adds its own cost), {total:.1f} ms of op self time")
    print(f"  matrix products {products:.1f} ms, everything else {total - products:.1f} ms")
    print(f"  {'op':<44}{'ms/frame':>10}{'calls/frame':>13}{'us/call':>9}")
    for key, (ms, calls) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:a.top]:
        tag = "  (product)" if key.split(" ")[0] in PRODUCTS else ""
        print(f"  {key:<44}{ms:>10.2f}{calls:>13.0f}{1e3 * ms / max(calls, 1):>9.1f}{tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
