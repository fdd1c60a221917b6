"""The `limits` convention: joint limits as the model's normalisation (tiny, smol, random weights).

Models trained by no public pipeline (the random-weight profiles) see each state joint's
[lower, upper] range as [-1, 1] and give actions in the same space. Images are the
engine's own rule (stretched to the model's square, engine/observation/observation.py), the prompt its
`Task: ..., State: ...;\\nAction: ` prefix. Checkpoints trained by openpi or LeRobot use
PolicyIO instead (models/pi05/processor.py): their statistics, resize-with-pad and prompt format.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..observation.observation import Observation
from .errors import PolicyIOError


def _limits(lower, upper, what: str) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.asarray(lower, np.float64).reshape(-1), np.asarray(upper, np.float64).reshape(-1)
    if lo.shape != hi.shape or lo.size == 0:
        raise PolicyIOError(f"{what}: {lo.size} lower and {hi.size} upper limits")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise PolicyIOError(f"{what}: limits must be finite with lower < upper")
    return lo, hi


@dataclass
class LimitsIO:
    state_lower: np.ndarray
    state_upper: np.ndarray
    action_lower: np.ndarray
    action_upper: np.ndarray
    horizon: int
    convention: str = "limits"

    @classmethod
    def from_limits(cls, state_lower, state_upper, action_lower, action_upper, horizon: int) -> "LimitsIO":
        return cls(*_limits(state_lower, state_upper, "state joints"),
                   *_limits(action_lower, action_upper, "action joints"), horizon)

    @property
    def action_dims(self) -> int:
        return self.action_lower.size

    def normalized_state(self, state) -> np.ndarray:
        x = 2.0 * (np.asarray(state, np.float64) - self.state_lower) / (self.state_upper - self.state_lower) - 1.0
        return np.clip(x, -1.0, 1.0)

    def observation(self, images: dict, state, task: str, stamp: float = 0.0) -> Observation:
        return Observation(images=images, state=self.normalized_state(state), instruction=task, stamp=stamp)

    def actions(self, chunk, state=None) -> np.ndarray:
        """[H, >= action_dims] in [-1, 1] space -> [H, action_dims] positions (not clipped:
        the caller's safety envelope clips and counts)."""
        a = np.asarray(chunk, np.float64)[:, : self.action_dims]
        return self.action_lower + (a + 1.0) * 0.5 * (self.action_upper - self.action_lower)

    def model_actions(self, robot_actions, state=None) -> np.ndarray:
        """The inverse of actions(): [n, >= action_dims] positions -> [n, action_dims] in
        [-1, 1] space (not clipped), e.g. the previous chunk as RTC's target. `state` is
        unused (no delta actions here); it keeps PolicyIO's signature."""
        x = np.asarray(robot_actions, np.float64)
        if x.ndim != 2 or x.shape[1] < self.action_dims:
            raise PolicyIOError(f"robot actions must be [n, >= {self.action_dims}], got shape {x.shape}")
        x = x[:, : self.action_dims]
        return 2.0 * (x - self.action_lower) / (self.action_upper - self.action_lower) - 1.0
