"""XR-0's per-robot-type action statistics: where a checkpoint keeps the processor's
action_config (A1 in processor.py's docstring), its parsing into RobotStats (mean, std, the
std > threshold action mask, the active dims; S5, A3) and a hand override of the active dims (A4)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ...policy_io import checkpoint as ckpt
from ...policy_io.errors import PolicyIOError

MASK_THRESHOLD = 1e-5
STATS_FILES = ("processor_config.json", "preprocessor_config.json")   # A1, in this order
EXPECTED_FORMAT = ('"action_config": {"<robot_type>": {"mean": [[32 floats] x H], '
                   '"std": [[32 floats] x H]}} (a leading [1, H, 32] batch axis is accepted)')


def _read_json(path: Path) -> dict | None:
    """The JSON object in `path`, None when there is no such file."""
    return ckpt.read_json(path) if path.is_file() else None


def _stat(values, where: str, action_dim: int) -> np.ndarray:
    """One mean/std array as finite float64 [H, action_dim] ([1, H, D] and [D] accepted)."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PolicyIOError(f"{where}: not a numeric array ({exc})") from exc
    if x.ndim == 3 and x.shape[0] == 1:
        x = x[0]
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[1] != action_dim or x.shape[0] < 1:
        raise PolicyIOError(f"{where}: expected [H, {action_dim}] (or [1, H, {action_dim}]), "
                            f"got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise PolicyIOError(f"{where}: contains NaN or inf")
    return x


@dataclass(frozen=True)
class RobotStats:
    """One robot type's statistics (S5), as the decoding and the action mask read them."""
    mean: np.ndarray            # [H, 32] float64
    std: np.ndarray             # [H, 32]
    mask: np.ndarray            # [H, 32] bool: std > threshold
    active_dims: tuple[int, ...]

    @property
    def horizon(self) -> int:
        return self.mean.shape[0]


def parse_action_config(config, where: str, action_dim: int, threshold: float) -> dict[str, RobotStats]:
    """{robot_type: RobotStats} from an action_config (EXPECTED_FORMAT); mask = std > threshold."""
    if not isinstance(config, dict) or not config:
        raise PolicyIOError(f"{where}: 'action_config' must be a non-empty object, expected {EXPECTED_FORMAT}")
    table = {}
    for robot_type, entry in config.items():
        if not isinstance(entry, dict) or "mean" not in entry or "std" not in entry:
            raise PolicyIOError(f"{where}: action_config[{robot_type!r}] needs 'mean' and 'std' "
                                f"(got {sorted(entry) if isinstance(entry, dict) else type(entry).__name__}); "
                                f"expected {EXPECTED_FORMAT}")
        mean = _stat(entry["mean"], f"{where}: action_config[{robot_type!r}].mean", action_dim)
        std = _stat(entry["std"], f"{where}: action_config[{robot_type!r}].std", action_dim)
        if mean.shape[0] == 1 and std.shape[0] > 1:
            mean = np.repeat(mean, std.shape[0], axis=0)
        if std.shape[0] == 1 and mean.shape[0] > 1:
            std = np.repeat(std, mean.shape[0], axis=0)
        if mean.shape != std.shape:
            raise PolicyIOError(f"{where}: action_config[{robot_type!r}] mean {mean.shape} and std "
                                f"{std.shape} differ")
        if np.any(std < 0):
            raise PolicyIOError(f"{where}: action_config[{robot_type!r}].std has negative values")
        mask = std > threshold
        active = tuple(int(d) for d in np.flatnonzero(mask.any(axis=0)))
        if not active:
            raise PolicyIOError(f"{where}: action_config[{robot_type!r}] has no active dim "
                                f"(every std <= {threshold})")
        table[str(robot_type)] = RobotStats(mean, std, mask, active)
    return table


def find_action_config(root: Path, stats_path: str | os.PathLike | None = None) -> tuple[Path, object]:
    """(the file, its action_config) (A1): stats_path when given (the key, or the whole file),
    else the first of STATS_FILES in `root` holding the key 'action_config'."""
    if stats_path is not None:
        path = Path(os.path.expanduser(str(stats_path)))
        data = _read_json(path)
        if data is None:
            raise PolicyIOError(f"statistics file {path} does not exist; it should hold {EXPECTED_FORMAT}")
        action_config = data.get("action_config", data)
    else:
        candidates = [root / name for name in STATS_FILES]
        path, action_config = None, None
        for candidate in candidates:
            data = _read_json(candidate)
            if data is not None and "action_config" in data:
                path, action_config = candidate, data["action_config"]
                break
        if path is None:
            found = [c.name for c in candidates if c.is_file()]
            raise PolicyIOError(
                f"no XR-0 action statistics in {root}: looked for the key 'action_config' in "
                f"{', '.join(c.name for c in candidates)} ("
                + (f"present without it: {', '.join(found)}" if found else "neither file exists")
                + f"). It should hold {EXPECTED_FORMAT}, i.e. the MiBotProcessor's per-robot "
                "mean/std; or pass stats_path= to a JSON file in that format.")
    return path, action_config


def with_active_dims(robots: dict[str, RobotStats], active_dims: dict[str, Sequence[int]],
                     action_dim: int) -> dict[str, RobotStats]:
    """`robots` with the active dims of some robot types set by hand (A4's override)."""
    robots = dict(robots)
    for name, dims in active_dims.items():
        if name not in robots:
            raise PolicyIOError(f"active_dims for unknown robot_type {name!r}; known: {', '.join(robots)}")
        dims = tuple(int(d) for d in dims)
        if not dims or len(set(dims)) != len(dims) or any(not 0 <= d < action_dim for d in dims):
            raise PolicyIOError(f"active_dims[{name!r}] must be distinct dims in 0..{action_dim - 1}, got {dims}")
        s = robots[name]
        robots[name] = RobotStats(s.mean, s.std, s.mask, tuple(sorted(dims)))
    return robots
