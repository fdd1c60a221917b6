"""The paper's evaluation workloads: camera count, state size, instruction, synthetic frames."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..observation.observation import Observation


@dataclass(frozen=True)
class Workload:
    name: str
    cameras: int
    state_dim: int
    instruction: str


WORKLOADS = {
    "libero": Workload("libero", 2, 8, "put the black bowl on the plate"),
    "droid": Workload("droid", 2, 8, "move the marker into the cup"),
    "aloha": Workload("aloha", 3, 14, "transfer the cube to the other arm"),
}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None


def synthetic_frames(workload: Workload, camera_slots: tuple[str, ...], image_size: int,
                     count: int, seed: int = 0) -> list[Observation]:
    """Deterministic observations: random camera images and a slowly moving state."""
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(count):
        images = {slot: rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)
                  for slot in camera_slots[: workload.cameras]}
        state = np.sin(np.arange(workload.state_dim) + 0.1 * i) * 0.9
        frames.append(Observation(images=images, state=state, instruction=workload.instruction,
                                  stamp=float(i)))
    return frames
