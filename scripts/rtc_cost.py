#!/usr/bin/env python3
"""RTC's extra action time: the action chunk sampled with RTC off vs guided, in one process.

    .venv/bin/python scripts/rtc_cost.py --model tiny --rounds 7 --per-round 5
    .venv/bin/python scripts/rtc_cost.py --model pi05-quarter --threads 2    # random weights

One prefix is prefilled once; each round times `per-round` samplings of each mode, the
modes' order alternating between rounds (so drift hits both alike). Guided chunks follow
the previous chunk's remainder (the same model's chunk from other noise, shifted by
`--shift` steps) with the delay `--delay` and RTCConfig's defaults (exp, beta 10, end 10).
Prints each mode's median ms per chunk and the per-round guided/off ratio (median, range).
Off runs as the engine does on this device: fused on CPU where built (--no-fused: eager).
"""
import argparse
import statistics
import sys
import time

import torch

from oxygen_ros.engine.rtc import RTCConfig, RTCGuide
from oxygen_ros.engine.registry import load_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--checkpoint", default=None, help="pi05 / pi05-quarter weights (else random)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--per-round", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=40)
    ap.add_argument("--delay", type=int, default=3)
    ap.add_argument("--shift", type=int, default=3)
    ap.add_argument("--no-fused", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model, _ = load_model(a.model, a.checkpoint, device=a.device)   # smol: its cached GGUF
    cfg, dev = model.cfg, model.device
    e = cfg.expert
    gen = torch.Generator().manual_seed(0)
    size = cfg.vision.image_size
    with torch.inference_mode():
        images = torch.rand(len(cfg.camera_slots), 3, size, size, generator=gen) * 2 - 1
        prefix = model.embed_prefix(images, torch.randint(0, 256, (a.prompt_tokens,), generator=gen).tolist())
        pool = model.new_pool(1, prefix.shape[1] + e.horizon)
        model.prefill(prefix, pool, 0)
    length = prefix.shape[1]
    noises = [torch.randn(e.horizon, e.action_dim, generator=gen) for _ in range(a.per_round + 1)]
    fused = not a.no_fused

    def sample(noise, rtc=None):
        with torch.inference_mode():
            out = model.sample_actions(pool, 0, length, noise, fused, rtc)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return out

    remainder = sample(noises[-1])[a.shift:]
    guide = RTCGuide(RTCConfig(mode="guided"), remainder, a.delay)
    modes = {"off": lambda n: sample(n), "guided": lambda n: sample(n, guide)}
    for run in modes.values():           # warm-up: caches, allocator, first-call costs
        for n in noises[:2]:
            run(n)
    per_round = {m: [] for m in modes}
    for r in range(a.rounds):
        for m in (("off", "guided") if r % 2 == 0 else ("guided", "off")):
            t0 = time.perf_counter()
            for n in noises[: a.per_round]:
                modes[m](n)
            per_round[m].append((time.perf_counter() - t0) * 1000 / a.per_round)
    print(f"model {cfg.name}, {dev}, "
          f"threads {torch.get_num_threads()}, prefix {length} tokens, H {e.horizon}, "
          f"{e.denoise_steps} steps, delay {a.delay}, off fused={fused}")
    for m, ms in per_round.items():
        print(f"  {m:<6} median {statistics.median(ms):8.2f} ms/chunk  [{min(ms):.2f}-{max(ms):.2f}]")
    ratios = [g / o for g, o in zip(per_round["guided"], per_round["off"])]
    print(f"  guided/off per round: x{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
