"""The robot's joints as the model sees them: per-joint limits map positions to [-1, 1]."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JointSpace:
    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def from_lists(cls, names, lower, upper) -> "JointSpace":
        """Validated joint space; ValueError naming the bad parameter otherwise."""
        names = tuple(names)
        if not names:
            raise ValueError("joint_names is empty")
        if len(set(names)) != len(names):
            raise ValueError(f"joint_names has duplicates: {list(names)}")
        lo, hi = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
        if lo.shape != (len(names),) or hi.shape != (len(names),):
            raise ValueError(f"joint_lower_limits ({lo.size}) and joint_upper_limits ({hi.size}) "
                             f"need one value per joint ({len(names)} joint_names)")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ValueError("joint limits must be finite")
        bad = [n for n, a, b in zip(names, lo, hi) if not a < b]
        if bad:
            raise ValueError(f"joint_lower_limits must be below joint_upper_limits; not so for {bad}")
        return cls(names, lo, hi)

    def normalise(self, positions: np.ndarray) -> np.ndarray:
        """Joint positions -> [-1, 1] (values beyond the limits are clipped)."""
        x = 2.0 * (np.asarray(positions, np.float64) - self.lower) / (self.upper - self.lower) - 1.0
        return np.clip(x, -1.0, 1.0)

    def denormalise(self, actions: np.ndarray) -> np.ndarray:
        """Normalised actions [..., >= len(names)] -> joint positions within the limits.

        Only the first len(names) action dimensions are used; values are clipped to
        [-1, 1] first, so a chunk never commands a position outside the limits.
        """
        a = np.clip(np.asarray(actions, np.float64)[..., : len(self.names)], -1.0, 1.0)
        return self.lower + (a + 1.0) * 0.5 * (self.upper - self.lower)
