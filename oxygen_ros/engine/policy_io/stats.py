"""Normalisation statistics, read from where each convention stores them next to the weights.

openpi:  assets/<asset_id>/norm_stats.json = {"norm_stats": {"state": {"mean", "std", "q01",
         "q99"}, "actions": {...}}} (lists; q01/q99 optional). Read as float64, as openpi does.
LeRobot: policy_preprocessor.json / policy_postprocessor.json = {"name", "steps": [{"registry_name",
         "config": {"eps", "features", "norm_map"}, "state_file"}]}; the `normalizer_processor`
         step's state_file holds `observation.state.<stat>` (and action.*), the
         `unnormalizer_processor` step's holds `action.<stat>`. Read as float32, as LeRobot does.
Readers report what they found; whether something is missing depends on the normalization
chosen, which the policy I/O that reads them decides (models/pi05/processor.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from .checkpoint import (ASSET_ID_KEYS, ASSETS_DIR, LEROBOT_POSTPROCESSOR, LEROBOT_PREPROCESSOR,
                         lookup, read_json)
from .errors import PolicyIOError

OPENPI_STATS_FILE = "norm_stats.json"
LEROBOT_EPS = 1e-8                      # NormalizerProcessorStep's default eps
LEROBOT_MODES = {"QUANTILES": "quantile", "MEAN_STD": "mean_std", "IDENTITY": "none"}
LEROBOT_STEPS = {  # ours -> (pipeline file, registry name, class name, FeatureType)
    "state": (LEROBOT_PREPROCESSOR, "normalizer_processor", "NormalizerProcessorStep", "STATE"),
    "actions": (LEROBOT_POSTPROCESSOR, "unnormalizer_processor", "UnnormalizerProcessorStep", "ACTION"),
}


@dataclass
class FoundStats:
    state: dict[str, np.ndarray] = field(default_factory=dict)    # stat name -> 1-D vector
    actions: dict[str, np.ndarray] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)                # statistics files read
    looked_for: list[str] = field(default_factory=list)            # for error messages
    mode: str | None = None          # the checkpoint's own normalization, in our names
    mode_problem: str | None = None  # why the checkpoint's normalization cannot be used
    eps: dict[str, float] = field(default_factory=dict)            # LeRobot: per step
    asset_id: str | None = None
    problem: str | None = None       # why no statistics file could be chosen at all


def _vectors(entry, where: str) -> dict[str, np.ndarray]:
    out = {}
    for stat, values in (entry or {}).items():
        if values is None:
            continue
        vec = np.asarray(values, dtype=np.float64)
        if vec.ndim != 1:
            raise PolicyIOError(f"{where}: statistic {stat!r} must be a vector, got shape {vec.shape}")
        out[stat] = vec
    return out


def _openpi_file(path: Path, found: FoundStats) -> None:
    stats = read_json(path).get("norm_stats")
    if not isinstance(stats, dict):
        raise PolicyIOError(f"{path} has no 'norm_stats' object")
    found.state = _vectors(stats.get("state"), f"{path} state")
    found.actions = _vectors(stats.get("actions"), f"{path} actions")
    found.files.append(path)


def read_stats_file(path: str | Path, found: FoundStats) -> FoundStats:
    """A user's statistics file in place of the checkpoint's: openpi's norm_stats.json
    format (.json) or LeRobot's flat `observation.state.<stat>` / `action.<stat>` tensors
    (.safetensors). The checkpoint's normalization mode and eps in `found` are kept."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise PolicyIOError(f"statistics file {path} does not exist")
    found.state, found.actions, found.files = {}, {}, []
    found.looked_for, found.problem = [str(path)], None
    if path.suffix == ".json":
        _openpi_file(path, found)
    elif path.suffix == ".safetensors":
        grouped = _load_grouped(path)
        found.state = grouped.get("observation.state", {})
        found.actions = grouped.get("action", {})
        found.files.append(path)
    else:
        raise PolicyIOError(f"statistics file {path}: expected openpi's norm_stats.json (.json) or "
                            "LeRobot's normalizer tensors (.safetensors)")
    return found


def read_openpi(root: Path, asset_id: str | None, config: dict) -> FoundStats:
    """Asset id: the argument, else the config's (ASSET_ID_KEYS), else the only asset folder."""
    quantile = lookup(config, "use_quantile_norm", "data.use_quantile_norm")
    found = FoundStats(mode="mean_std" if quantile is False else "quantile")  # pi0.5: quantiles
    assets = root / ASSETS_DIR
    # Asset ids may hold a slash (physical-intelligence/libero), so search the whole tree.
    available = sorted(p.parent.relative_to(assets).as_posix()
                       for p in assets.rglob(OPENPI_STATS_FILE)) if assets.is_dir() else []
    chosen = asset_id or lookup(config, *ASSET_ID_KEYS)
    if chosen is None and len(available) == 1:
        chosen = available[0]
    if chosen is None:
        found.looked_for.append(f"{assets}/<asset_id>/{OPENPI_STATS_FILE}")
        found.problem = (f"several asset folders hold statistics ({', '.join(available)}) and "
                         "none is chosen: pass asset_id=" if available else
                         f"no {OPENPI_STATS_FILE} under {assets}")
        return found
    found.asset_id = str(chosen)
    path = assets / found.asset_id / OPENPI_STATS_FILE
    found.looked_for.append(str(path))
    if not path.is_file():
        found.problem = f"{path} does not exist" + (
            f" (asset folders with statistics: {', '.join(available)})" if available else "")
        return found
    _openpi_file(path, found)
    return found


def _find_step(pipeline: dict, registry_name: str, class_name: str) -> dict | None:
    for step in pipeline.get("steps") or []:
        if isinstance(step, dict) and (step.get("registry_name") == registry_name
                                       or str(step.get("class", "")).endswith("." + class_name)):
            return step
    return None


def _load_grouped(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """`observation.state.q01` -> {"observation.state": {"q01": ...}}, as float32 like LeRobot."""
    grouped: dict[str, dict[str, np.ndarray]] = {}
    for flat, tensor in load_file(str(path)).items():
        key, _, stat = flat.rpartition(".")
        grouped.setdefault(key, {})[stat] = tensor.to(torch.float32).reshape(-1).numpy()
    return grouped


def read_lerobot(root: Path, config: dict) -> FoundStats:
    found = FoundStats()
    mapping = config.get("normalization_mapping") or {}
    modes = {}
    for ours, (file, registry, class_name, feature_type) in LEROBOT_STEPS.items():
        path = root / file
        step = _find_step(read_json(path), registry, class_name)
        step_config = (step or {}).get("config") or {}
        modes[ours] = (step_config.get("norm_map") or mapping).get(feature_type)
        found.eps[ours] = float(step_config.get("eps", LEROBOT_EPS))
        if step is None or not step.get("state_file"):
            why = "has no" if step is None else "names no state_file in its"
            found.looked_for.append(f"{path} ({why} '{registry}' step)")
            continue
        tensors = root / step["state_file"]
        found.looked_for.append(str(tensors))
        if not tensors.is_file():
            continue
        found.files.append(tensors)
        features = step_config.get("features") or {}
        key = "action" if ours == "actions" else next(
            (k for k, f in features.items() if isinstance(f, dict) and f.get("type") == "STATE"),
            "observation.state")
        setattr(found, ours, _load_grouped(tensors).get(key, {}))
    if modes["state"] is None and modes["actions"] is None:
        return found          # nothing said: the policy's default applies
    if modes["state"] != modes["actions"] or modes["state"] not in LEROBOT_MODES:
        found.mode_problem = (f"the checkpoint normalizes STATE with {modes['state']} and ACTION with "
                              f"{modes['actions']}; policy I/O supports one of QUANTILES, MEAN_STD, "
                              "IDENTITY for both")
    else:
        found.mode = LEROBOT_MODES[modes["state"]]
    return found
