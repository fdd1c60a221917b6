"""Narration accuracy of stage 1's encoder on held-out frames (training-seed episodes kept
out, hparams.held_out), through the engine's isolated path: issue 41's rule, exactly one of
table / gripper / bowl and the right one."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .common import ensure_io
from .data import Demos
from .kv_cache import stage1_model
from .stage1 import narrate, narration_accuracy


def narration_report(root: Path, demo_dir: Path, frames: int = 90, seed: int = 11, every: int = 0) -> dict:
    """frames: a sample balanced by place; every > 0 instead: every k-th frame of every
    held-out episode (the places as often as an episode has them, transitions included)."""
    torch.set_num_threads(1)
    model, tok, step = stage1_model(root)
    held = Demos(demo_dir, "held_out")
    io = ensure_io(root, None, tok)
    idx = (np.arange(0, len(held), every) if every > 0
           else held.sample(frames, np.random.default_rng(seed), balanced=True))
    res = narrate(model, tok, io, held, idx)
    report = {"stage1_step": step, "frames": len(res), "episodes": len(held.episodes),
              "selection": f"every {every}th frame" if every > 0 else "balanced by place",
              **narration_accuracy(res), "examples": sorted({t for _, t in res})[:12]}
    print(json.dumps(report, indent=1))
    name = f"narration_every{every}.json" if every > 0 else "narration.json"
    (Path(root) / "stage1" / name).write_text(json.dumps(report, indent=1))
    return report
