#!/usr/bin/env python3
"""A node-like engine's resident memory against its weights and KV pool (issue 44).

Builds the model and engine from a params file with engine/factory.build_engine, as the
node does (its malloc arena cap too; default config/demo.yaml: the smol profile, 3 cameras,
3 KV slots), runs --frames frames of synthetic observations with a narration every 4 frames
and a question every 10, and prints (or writes as JSON) the process's RSS (anonymous and
file-backed), the weights' bytes (model.weight_bytes), the KV pool's bytes, the
oneDNN-blocked copies' bytes, the parameters in ordinary memory and on a file, and
RSS / (weights + KV pool), also without what `import torch, numpy` alone holds (rss_imports_mb).

    nice -n 5 .venv/bin/python scripts/measure_rss.py                 # smol, 40 frames
    nice -n 5 .venv/bin/python scripts/measure_rss.py --params config/tiny.yaml --json out.json

Memory figures only: the machine may be busy (no timings are reported).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB = 2**20


def status_kb() -> dict:
    """VmRSS, RssAnon, RssFile (kB) from /proc/self/status."""
    with open("/proc/self/status") as f:
        rows = (line.split() for line in f)
        return {r[0].rstrip(":"): int(r[1]) for r in rows if r and r[0] in ("VmRSS:", "RssAnon:", "RssFile:")}


def resident_dense_bytes(model) -> tuple[int, int]:
    """(bytes of parameters in ordinary memory, bytes of parameters mapped from a file):
    each storage counted once; the mapped ones count in RssFile only where touched."""
    from oxygen_ros.engine.layers.mapped_weights import weight_storages
    w = weight_storages(model)
    return sum(w.in_memory.values()), sum(w.on_file.values())


def layout_bytes(model) -> dict:
    from oxygen_ros.engine.layers.blocks import packed_groups
    groups = packed_groups(model)
    blocked = sum(g.blocked.numel() * g.blocked.element_size() for g in groups if g.blocked is not None)
    matrices = sum(g.matrix.numel() * g.matrix.element_size() for g in groups if g.matrix is not None)
    anon, mapped = resident_dense_bytes(model)
    return {"blocked_bytes": blocked, "packed_dense_bytes": matrices,
            "params_in_memory_bytes": anon, "params_on_file_bytes": mapped}


def run_frames(model, engine, frames: int) -> None:
    import torch
    from oxygen_ros.engine.bench.workloads import get_workload, synthetic_frames
    from oxygen_ros.engine.requests import LanguageRequest
    obs = synthetic_frames(get_workload("aloha"), model.cfg.camera_slots, model.cfg.vision.image_size,
                           frames, seed=0)
    gen = torch.Generator().manual_seed(1)
    e = model.cfg.expert
    for i, o in enumerate(obs):
        if i % 4 == 0:
            engine.submit(LanguageRequest("Say in one short sentence what the robot is doing now.",
                                          "narration", 24))
        if i % 10 == 5:
            engine.submit(LanguageRequest("What have you done so far?", "answer", 32))
        engine.step(o, torch.randn(e.horizon, e.action_dim, generator=gen))


def measure(params: Path, frames: int) -> dict:
    from oxygen_ros.engine.factory import build_engine
    from oxygen_ros.node import malloc_arenas
    from oxygen_ros.tools.params_files import params_from_file, with_node_defaults
    malloc_arenas.limit()          # as the node does before its threads start
    p = with_node_defaults(params_from_file(params))
    before = status_kb()
    import numpy, torch  # noqa: F401  (what any engine process holds before it builds anything)
    imports = status_kb()
    model, _, engine = build_engine(p)
    built = status_kb()
    run_frames(model, engine, frames)
    after = status_kb()
    weights = model.weight_bytes()
    kv = engine.pool.bytes_total
    return {"params": str(params), "model": p["model"], "frames": frames,
            "rss_start_mb": before["VmRSS"] / 1024, "rss_imports_mb": imports["VmRSS"] / 1024,
            "rss_built_mb": built["VmRSS"] / 1024,
            "rss_mb": after["VmRSS"] / 1024, "rss_anon_mb": after["RssAnon"] / 1024,
            "rss_file_mb": after["RssFile"] / 1024,
            "weights_mb": weights / MB, "kv_pool_mb": kv / MB,
            **{k.replace("_bytes", "_mb"): v / MB for k, v in layout_bytes(model).items()},
            "rss_over_weights_and_kv": after["VmRSS"] * 1024 / (weights + kv),
            "rss_past_imports_over_weights_and_kv": (after["VmRSS"] - imports["VmRSS"]) * 1024 / (weights + kv)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=Path, default=ROOT / "config" / "demo.yaml")
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    report = measure(args.params, args.frames)
    for k, v in report.items():
        print(f"{k:28} {v:.3f}" if isinstance(v, float) else f"{k:28} {v}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
