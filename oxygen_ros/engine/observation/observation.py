"""Observations and how they become the model's prefix (images, instruction, state)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


class ObservationError(ValueError):
    """An observation the model cannot use (wrong shape, non-finite state, ...)."""


@dataclass
class Observation:
    """One control frame's input.

    images: camera slot name -> HxWx3 uint8 RGB array; a slot that is absent or None is
      masked (pi0.5 masks missing cameras).
    state: proprioception normalised to [-1, 1] (values outside are clipped).
    pixels, prompt_ids: the model inputs already made by a checkpoint's policy I/O
      (engine/policy_io): pixels [N, 3, S, S] in [-1, 1] for the present cameras in slot
      order, prompt_ids the prefix tokens with BOS. When set they replace what `images`,
      `state` and `instruction` would give (the engine's own generic rules below).
    """
    images: dict[str, np.ndarray | None]
    state: np.ndarray
    instruction: str
    stamp: float = 0.0
    extra: dict = field(default_factory=dict)
    pixels: torch.Tensor | None = None
    prompt_ids: list[int] | None = None


def image_tensor(img: np.ndarray, size: int) -> torch.Tensor:
    """HxWx3 uint8 RGB -> [3, size, size] float32 in [-1, 1] (bilinear resize)."""
    if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] != 3 or img.size == 0:
        shape = getattr(img, "shape", None)
        raise ObservationError(f"camera image must be a non-empty HxWx3 array, got shape {shape}")
    if img.dtype != np.uint8:
        raise ObservationError(f"camera image must be uint8, got {img.dtype}")
    x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float()[None]
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return (x[0] / 127.5 - 1.0).clamp(-1.0, 1.0)


def discretize_state(state: np.ndarray, bins: int = 256) -> list[int]:
    """pi0.5's state tokens: digitize into `bins` equal bins over [-1, 1]."""
    s = np.asarray(state, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(s)):
        raise ObservationError("state contains NaN or inf")
    edges = np.linspace(-1.0, 1.0, bins + 1)[:-1]
    return (np.digitize(np.clip(s, -1.0, 1.0), edges) - 1).tolist()


def prefix_text(instruction: str, state: np.ndarray) -> str:
    bins = " ".join(str(b) for b in discretize_state(state))
    return f"Task: {instruction.strip()}, State: {bins};\nAction: "


def camera_batch(obs: Observation, slots: tuple[str, ...], size: int) -> torch.Tensor:
    """The valid cameras, in slot order, as [N, 3, size, size]; masked slots are skipped."""
    unknown = set(obs.images) - set(slots)
    if unknown:
        raise ObservationError(f"unknown camera slot(s) {sorted(unknown)}; model slots: {list(slots)}")
    imgs = [image_tensor(obs.images[s], size) for s in slots if obs.images.get(s) is not None]
    if not imgs:
        return torch.zeros(0, 3, size, size)
    return torch.stack(imgs)
