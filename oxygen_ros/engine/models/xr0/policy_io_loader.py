"""Read an XR-0 checkpoint directory into its XR0PolicyIO: config.json's state/action dims,
the action_config statistics (action_stats.py; where they live is assumption A1 in
processor.py's docstring), the per-robot-type overrides, the image settings and the
action rate."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ...policy_io import checkpoint as ckpt
from ...policy_io.errors import PolicyIOError
from ..qwen3vl.image_processing import RESIZE_MODES, Qwen3VLImageSettings
from .action_stats import MASK_THRESHOLD, find_action_config, parse_action_config, with_active_dims
from .processor import ACTION_DIM, STATE_DIM, XR0PolicyIO

PREPROCESSOR_FILE = "preprocessor_config.json"
CONFIG_FILE = "config.json"


def load_xr0_policy_io(checkpoint_dir: str | os.PathLike, robot_type: str | None = None, *,
                       stats_path: str | os.PathLike | None = None, resize_mode: str = "pil",
                       unnormalize_eps: float = 0.0, mask_threshold: float = MASK_THRESHOLD,
                       active_dims: dict[str, Sequence[int]] | None = None,
                       delta_dims: dict[str, Sequence[int]] | None = None) -> XR0PolicyIO:
    """Read an XR-0 checkpoint directory's processor statistics and image settings.

    robot_type: the default robot type (else the only one the checkpoint defines).
    stats_path: a JSON file with the action_config (A1 format) used instead.
    resize_mode: "pil" (default: the deploy code's use_fast=False) or "torch".
    active_dims / delta_dims: per robot type, override A4 / add the raw state on dims."""
    root = Path(os.path.expanduser(str(checkpoint_dir)))
    if root.is_file():
        root = root.parent
    if not root.is_dir():
        raise PolicyIOError(f"checkpoint directory {root} does not exist")
    if resize_mode not in RESIZE_MODES:
        raise PolicyIOError(f"resize_mode must be one of {RESIZE_MODES}, got {resize_mode!r}")
    config = ckpt.read_json(root / CONFIG_FILE)         # {} when absent
    state_dim = config.get("state_dim", STATE_DIM)
    action_dim = config.get("action_dim", ACTION_DIM)
    for key, value in (("state_dim", state_dim), ("action_dim", action_dim)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PolicyIOError(f"{root / CONFIG_FILE}: {key} must be a positive int, got {value!r}")

    path, action_config = find_action_config(root, stats_path)
    robots = with_active_dims(parse_action_config(action_config, str(path), action_dim, mask_threshold),
                              active_dims or {}, action_dim)
    deltas = {}
    for name, dims in (delta_dims or {}).items():
        if name not in robots:
            raise PolicyIOError(f"delta_dims for unknown robot_type {name!r}; known: {', '.join(robots)}")
        dims = tuple(int(d) for d in dims)
        bad = [d for d in dims if d not in robots[name].active_dims or d >= state_dim]
        if bad:
            raise PolicyIOError(f"delta_dims[{name!r}] {bad} are not active action dims "
                                f"{list(robots[name].active_dims)} (or exceed state_dim {state_dim})")
        if dims:
            deltas[name] = dims

    if robot_type is None and len(robots) == 1:
        robot_type = next(iter(robots))
    if robot_type is not None and robot_type not in robots:
        raise PolicyIOError(f"unknown robot_type {robot_type!r}: {path} defines {', '.join(robots)}")

    pre_file = root / PREPROCESSOR_FILE
    if pre_file.is_file():
        settings = Qwen3VLImageSettings.from_hf_dict(ckpt.read_json(pre_file), resize_mode=resize_mode)
        source = str(pre_file)
    else:
        settings = Qwen3VLImageSettings(resize_mode=resize_mode)
        source = "Qwen3-VL defaults (no preprocessor_config.json)"
    rate, rate_source = ckpt.action_rate_hz(root)
    return XR0PolicyIO(checkpoint_dir=root, stats_file=path, robots=robots, robot_type=robot_type,
                       image_settings=settings, image_settings_source=source, state_dim=state_dim,
                       action_dim=action_dim, unnormalize_eps=float(unnormalize_eps),
                       mask_threshold=float(mask_threshold), delta_dims=deltas,
                       action_rate_hz=rate, action_rate_source=rate_source)
