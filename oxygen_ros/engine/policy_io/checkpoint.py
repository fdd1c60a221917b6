"""What a checkpoint directory's own files say about policy I/O (no statistics here)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import PolicyIOError

CONFIG_FILE = "config.json"
LEROBOT_PREPROCESSOR = "policy_preprocessor.json"
LEROBOT_POSTPROCESSOR = "policy_postprocessor.json"
ASSETS_DIR = "assets"
DEFAULT_HORIZON = 50
DEFAULT_DENOISE_STEPS = 10
MODEL_ACTION_DIMS = 32      # pi0.5 pads actions to 32; the fallback for action_dims
# openpi's converter writes none of these; accepted for configs written by hand or dumped
# from an openpi TrainConfig (data.assets.asset_id).
ASSET_ID_KEYS = ("asset_id", "data.asset_id", "assets.asset_id", "data.assets.asset_id")


def read_json(path: Path) -> dict:
    """A JSON object from disk: {} when absent; an unreadable file is an error, never skipped."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PolicyIOError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyIOError(f"{path} does not hold a JSON object")
    return data


def lookup(config: dict, *dotted_keys: str):
    """The first of `dotted_keys` ("data.asset_id") present in config, else None."""
    for dotted in dotted_keys:
        node = config
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return None


def checkpoint_root(checkpoint_dir: str | os.PathLike) -> Path:
    """The checkpoint directory; a path to its weights file means the file's directory."""
    path = Path(os.path.expanduser(str(checkpoint_dir)))
    if path.is_file():
        path = path.parent
    if not path.is_dir():
        raise PolicyIOError(f"checkpoint directory {path} does not exist")
    return path


def detect_convention(root: Path) -> str:
    if (root / LEROBOT_PREPROCESSOR).is_file():
        return "lerobot"
    if (root / ASSETS_DIR).is_dir():
        return "openpi"
    raise PolicyIOError(f"cannot tell the checkpoint's convention: {root} has neither "
                        f"{LEROBOT_PREPROCESSOR} (LeRobot) nor an {ASSETS_DIR}/ folder (openpi); "
                        "pass convention='openpi' or 'lerobot'")


def horizon_and_steps(config: dict) -> tuple[int, int]:
    # Mirrors the pi0.5 weights loader's rule (engine/models/pi05/checkpoint.py, adapt_config): the
    # first positive int of openpi's `action_horizon` or LeRobot's `chunk_size`, and
    # LeRobot's `num_inference_steps`. Keep the two in step until they are deduplicated.
    horizon, steps = DEFAULT_HORIZON, DEFAULT_DENOISE_STEPS
    for key in ("action_horizon", "chunk_size"):
        if isinstance(config.get(key), int) and config[key] > 0:
            horizon = config[key]
            break
    if isinstance(config.get("num_inference_steps"), int) and config["num_inference_steps"] > 0:
        steps = config["num_inference_steps"]
    return horizon, steps


# Where a checkpoint directory may say its training data's rate (frames per second), in
# order: our own key and a hand-written fps in config.json, LeRobot's training config
# (its env's fps), a LeRobot dataset's meta/info.json beside the weights.
ACTION_RATE_SOURCES = (
    (CONFIG_FILE, ("action_rate_hz", "fps", "env.fps", "dataset.fps")),
    ("train_config.json", ("env.fps", "dataset.fps", "fps")),
    ("meta/info.json", ("fps",)),
)


def action_rate_hz(root: Path) -> tuple[float | None, str]:
    """(the rate the checkpoint's actions were recorded at, the file and key that say it);
    (None, "") when no file says it."""
    for name, keys in ACTION_RATE_SOURCES:
        config = read_json(root / name)
        for key in keys:
            value = lookup(config, key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return float(value), f"{name}: {key}"
    return None, ""


def lerobot_action_dims(config: dict) -> int | None:
    """LeRobot's robot action width: output_features' ACTION shape (what it cuts 32 down to)."""
    features = config.get("output_features")
    for name, feature in (features.items() if isinstance(features, dict) else ()):
        if isinstance(feature, dict) and (feature.get("type") == "ACTION" or name == "action"):
            shape = feature.get("shape")
            if isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int) and shape[0] > 0:
                return shape[0]
    return None
