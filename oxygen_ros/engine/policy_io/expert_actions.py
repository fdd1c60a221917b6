"""A further action expert's own action statistics (several experts on one prefix).

A further expert trained on its own data gives actions in the space its dataset's
statistics define. Its statistics file is one of the formats the first expert's
checkpoints use (stats.py): openpi's norm_stats.json (its "actions" entry, openpi's
formulas) or LeRobot's normalizer tensors (.safetensors, `action.<stat>`, LeRobot's
formulas); normalization "quantile" (q01/q99) or "mean_std". Actions are absolute
positions of the expert's joints: the statistics' first dims, one per joint. Without a
file a further expert uses the `limits` convention (limits.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import PolicyIOError
from .normalize import normalize, unnormalize
from .stats import LEROBOT_EPS, FoundStats, read_stats_file

NEEDS = {"quantile": ("q01", "q99"), "mean_std": ("mean", "std")}


@dataclass
class StatsActionIO:
    stats: dict[str, np.ndarray]     # the normalization's statistics, cut to the joints
    normalization: str               # quantile | mean_std
    formulas: str                    # openpi | lerobot (normalize.py), from the file's format
    source: Path
    horizon: int
    convention: str = "statistics"

    @classmethod
    def from_file(cls, path: str | Path, normalization: str, joints: int, horizon: int) -> "StatsActionIO":
        if normalization not in NEEDS:
            raise PolicyIOError(f"action normalization must be one of {sorted(NEEDS)}, got {normalization!r}")
        found = read_stats_file(path, FoundStats())
        source = found.files[0]
        missing = [k for k in NEEDS[normalization] if k not in found.actions]
        if missing:
            other = next((m for m, keys in NEEDS.items() if all(k in found.actions for k in keys)), None)
            raise PolicyIOError(f"{source}: {normalization} normalization needs action statistics "
                                f"{list(NEEDS[normalization])}, the file lacks {missing}"
                                + (f" (it has what {other} needs)" if other else ""))
        stats = {k: found.actions[k] for k in NEEDS[normalization]}
        width = min(v.size for v in stats.values())
        if width < joints:
            raise PolicyIOError(f"{source}: action statistics have {width} dims for {joints} joints")
        stats = {k: v[:joints] for k, v in stats.items()}
        if not all(np.all(np.isfinite(v)) for v in stats.values()):
            raise PolicyIOError(f"{source}: action statistics contain NaN or inf")
        return cls(stats, normalization, "openpi" if source.suffix == ".json" else "lerobot", source, horizon)

    @property
    def action_dims(self) -> int:
        return next(iter(self.stats.values())).size

    @property
    def eps(self) -> float:
        return LEROBOT_EPS          # LeRobot's default; openpi's formulas carry their own

    def actions(self, chunk, state=None) -> np.ndarray:
        """[H, >= action_dims] normalised -> [H, action_dims] joint positions (not clipped:
        the caller clips into the joint limits and counts)."""
        y = np.asarray(chunk, np.float64)
        if y.ndim != 2 or y.shape[1] < self.action_dims:
            raise PolicyIOError(f"expert chunk must be [H, >= {self.action_dims}], got shape {y.shape}")
        return unnormalize(y[:, : self.action_dims], self.stats, self.normalization, self.formulas, self.eps)

    def model_actions(self, robot_actions, state=None) -> np.ndarray:
        """The inverse of actions() (RTC's target from the previous chunk); `state` unused
        (absolute actions)."""
        x = np.asarray(robot_actions, np.float64)
        if x.ndim != 2 or x.shape[1] < self.action_dims:
            raise PolicyIOError(f"robot actions must be [n, >= {self.action_dims}], got shape {x.shape}")
        return normalize(x[:, : self.action_dims], self.stats, self.normalization, self.formulas, self.eps)
