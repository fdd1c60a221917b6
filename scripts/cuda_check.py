#!/usr/bin/env python3
"""Short prepared check of the CUDA path (run on a GPU machine; exits 2 without CUDA).

    .venv/bin/python scripts/cuda_check.py [--profile pi05-quarter|pi05] [--frames 12]

For the profile with random weights in bfloat16 on CUDA it checks that
  1. oxygen's action chunks match isolated execution (bf16 tolerance) and its texts
     equal isolated greedy decoding (mismatches are printed);
  2. the CUDA graphs (decode step; prefill and whole action chunk per prefix bucket) are
     all captured when the engine is built and none during frames, and a frame runs
     without host syncs up to its one tokens-to-host transfer (torch.cuda sync debug
     mode "error" from the frame's start);
  3. the graphed prefill + chunk against the eager VLAModel.prefill + sample_actions on
     the same prefixes and noise (bf16 tolerance on the actions and the prefix K/V),
     with their times side by side;
  4. oxygen vs sequential frame times side by side (ratio printed, not asserted).
"""
import argparse
import statistics
import sys
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="pi05-quarter")
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("cuda_check: no CUDA device here", file=sys.stderr)
        return 2
    from oxygen_ros.engine.bench.baselines import SequentialEngine
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
    from oxygen_ros.engine.bench.workloads import get_workload, synthetic_frames
    from oxygen_ros.engine.frame import PhaseTimer

    model, tok = load_model(args.profile, dtype="bfloat16", device="cuda")
    print(f"{args.profile}: {model.weight_bytes() / 2**30:.2f} GiB of bf16 weights on {torch.cuda.get_device_name()}")
    frames = synthetic_frames(get_workload("libero"), model.cfg.camera_slots, 224, args.frames + 1)
    e = model.cfg.expert
    noises = [torch.randn(e.horizon, e.action_dim, generator=torch.Generator().manual_seed(i)) for i in range(len(frames))]
    cfg = EngineConfig(max_requests=args.tokens // args.k + 3, max_new_tokens=args.tokens, steps_per_frame=args.k)

    # (2) no host sync inside a frame: sync debug mode "error" from the frame's start to
    # its one device-to-host transfer (_collect); every decode graph is captured when the
    # engine is built, so none may be captured during a frame
    original_step, original_collect = OxygenEngine.step, OxygenEngine._collect

    def strict_step(self, obs, noise=None):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return original_step(self, obs, noise)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    def collect(self, *a):
        torch.cuda.set_sync_debug_mode("default")   # the frame's transfer: the rest may sync
        return original_collect(self, *a)

    OxygenEngine.step, OxygenEngine._collect = strict_step, collect

    results, late_captures, graphs_built, chunk_built, late_chunk = {}, 0, 0, 0, 0
    for name, cls in (("sequential", SequentialEngine), ("oxygen", OxygenEngine)):
        t = time.perf_counter()
        eng = cls(model, tok, cfg)
        built_ms = (time.perf_counter() - t) * 1e3
        if hasattr(eng, "decoder"):
            graphs_built, chunk_built = eng.decoder.captured, eng.chunk.captured
        times, outs, texts = [], [], {}
        for f in range(args.frames):
            eng.submit(LanguageRequest("Describe what the robot is doing.", max_new_tokens=args.tokens, ignore_eos=True))
            torch.cuda.synchronize()
            t = time.perf_counter()
            res = eng.step(frames[f], noises[f])
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
            outs.append(res)
            texts.update({d.request_id: d.full_text for d in res.finished})
        results[name] = (times, outs, texts)
        graphs = ""
        if hasattr(eng, "decoder"):
            late_captures = eng.decoder.captured - graphs_built
            late_chunk = eng.chunk.captured - chunk_built
            graphs = (f"; {graphs_built} decode + {chunk_built} prefill/chunk graphs "
                      f"({len(eng.chunk.buckets())} prefix buckets) captured in {built_ms:.0f} ms at build, "
                      f"{late_captures} + {late_chunk} during frames")
            oxygen = eng
        print(f"{name:<10} frame median {statistics.median(times[3:]):8.1f} ms{graphs}")
    OxygenEngine.step, OxygenEngine._collect = original_step, original_collect
    seq, ox = results["sequential"], results["oxygen"]
    print(f"oxygen/sequential frame-rate ratio x{statistics.median(seq[0][3:]) / statistics.median(ox[0][3:]):.2f}")
    diff = max(float(abs(a.actions - b.actions).max()) for a, b in zip(seq[1], ox[1]))
    common = set(seq[2]) & set(ox[2])
    mism = [r for r in common if seq[2][r] != ox[2][r]]
    print(f"max action |diff| {diff:.3e} (bf16); {len(common)} requests compared, {len(mism)} text mismatches")
    for r in sorted(mism)[:5]:
        print(f"  request {r}: sequential {seq[2][r]!r} vs oxygen {ox[2][r]!r}")
    chunk_ok = check_chunk(oxygen, model, frames[:3], noises[:3], PhaseTimer)
    ok = (diff < 5e-2 and not mism and chunk_ok and late_captures == 0 and late_chunk == 0
          and graphs_built > 0 and chunk_built == 2 * len(oxygen.chunk.buckets()))
    print("CUDA check", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def check_chunk(eng, model, frames, noises, PhaseTimer, reps: int = 5) -> bool:
    """(3) The engine's graphed prefill + chunk vs the eager model calls on the same
    prefixes and noise, in a separate pool; bf16 tolerances, times side by side."""
    chunk, worst_a, worst_kv, t_graph, t_eager = eng.chunk, 0.0, 0.0, [], []
    ref = model.new_pool(1, eng.pool.max_len)
    with torch.inference_mode():
        for obs, noise in zip(frames, noises):
            prefix = eng.prefix_embeddings(obs, PhaseTimer())
            n = prefix.shape[1]
            for _ in range(reps):
                torch.cuda.synchronize()
                t = time.perf_counter()
                chunk.prefill(prefix)
                got = chunk.sample(n, noise)
                torch.cuda.synchronize()
                t_graph.append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                model.prefill(prefix, ref, 0)
                want = model.sample_actions(ref, 0, n, noise)
                torch.cuda.synchronize()
                t_eager.append((time.perf_counter() - t) * 1e3)
            worst_a = max(worst_a, float((got.float() - want.float()).abs().max()))
            s = chunk.slot
            for mine, theirs in ((eng.pool.k[:, s, :, :n], ref.k[:, 0, :, :n]), (eng.pool.v[:, s, :, :n], ref.v[:, 0, :, :n])):
                scale = float(theirs.float().abs().max()) or 1.0
                worst_kv = max(worst_kv, float((mine.float() - theirs.float()).abs().max()) / scale)
            print(f"  prefix {n} tokens -> bucket {chunk.prefix_bucket(n)}")
    ok = worst_a < 5e-2 and worst_kv < 5e-2
    print(f"prefill+chunk graphs vs eager: max action |diff| {worst_a:.3e}, prefix K/V max |diff| / max |K/V| "
          f"{worst_kv:.3e} (bf16); median {statistics.median(t_graph):.2f} ms graphed vs "
          f"{statistics.median(t_eager):.2f} ms eager{'' if ok else '  <- FAILED'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
