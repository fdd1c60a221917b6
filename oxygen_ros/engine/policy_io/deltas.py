"""Delta <-> absolute actions on the dims a mask marks (openpi DeltaActions/AbsoluteActions).

The mask may be shorter than the action width (dims past it are untouched); the offset is
the robot's raw (unnormalized) state, the same value for every step of the chunk.
"""
from __future__ import annotations

import numpy as np


def _offset(mask, state: np.ndarray) -> np.ndarray:
    mask = np.asarray(mask, dtype=bool)
    return np.where(mask, state[: mask.shape[0]], 0)


def to_absolute(actions: np.ndarray, state: np.ndarray, mask) -> np.ndarray:
    out = np.array(actions, copy=True)
    out[..., : len(mask)] += _offset(mask, state)
    return out


def to_delta(actions: np.ndarray, state: np.ndarray, mask) -> np.ndarray:
    out = np.array(actions, copy=True)
    out[..., : len(mask)] -= _offset(mask, state)
    return out
