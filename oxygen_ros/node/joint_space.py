"""Named joints with position limits: the state the node reads and the safety envelope of
every position it publishes (a chunk point beyond a limit is clipped to it and counted)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JointSpace:
    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def from_lists(cls, names, lower, upper, what: str = "joint") -> "JointSpace":
        """Validated joint space; ValueError naming the bad parameter otherwise."""
        names = tuple(names)
        if not names:
            raise ValueError(f"{what}_names is empty")
        if len(set(names)) != len(names):
            raise ValueError(f"{what}_names has duplicates: {list(names)}")
        lo, hi = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
        if lo.shape != (len(names),) or hi.shape != (len(names),):
            raise ValueError(f"{what}_lower_limits ({lo.size}) and {what}_upper_limits ({hi.size}) "
                             f"need one value per joint ({len(names)} {what}_names)")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ValueError(f"{what} limits must be finite")
        bad = [n for n, a, b in zip(names, lo, hi) if not a < b]
        if bad:
            raise ValueError(f"{what}_lower_limits must be below {what}_upper_limits; not so for {bad}")
        return cls(names, lo, hi)

    def inside(self, envelope: "JointSpace") -> "JointSpace":
        """These joints with each limit narrowed to `envelope`'s for the joints it also names
        (action limits never widen the robot's joint limits); ValueError where they do not overlap."""
        lo, hi = self.lower.copy(), self.upper.copy()
        for i, name in enumerate(self.names):
            if name in envelope.names:
                j = envelope.names.index(name)
                lo[i], hi[i] = max(lo[i], envelope.lower[j]), min(hi[i], envelope.upper[j])
                if not lo[i] < hi[i]:
                    raise ValueError(f"limits of {name} [{self.lower[i]:g}, {self.upper[i]:g}] do not overlap its "
                                     f"joint limits [{envelope.lower[j]:g}, {envelope.upper[j]:g}]")
        return JointSpace(self.names, lo, hi)

    def clip(self, positions: np.ndarray) -> tuple[np.ndarray, int]:
        """Positions [H, joints] clipped into the limits, and how many of the H points had
        at least one joint clipped (NaN counts as clipped and becomes the lower limit)."""
        p = np.asarray(positions, np.float64)
        bad = ~np.isfinite(p)
        clipped = np.clip(np.where(bad, self.lower, p), self.lower, self.upper)
        changed = bad | (clipped != p)
        return clipped, int(changed.any(axis=-1).sum())
