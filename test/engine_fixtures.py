"""Shared inputs for the engine tests: the tiny model, observations, an isolated reference."""
import numpy as np

from oxygen_ros.engine.models.pi05.configuration import TINY
from oxygen_ros.engine.models.pi05.modeling import build_random_model
from oxygen_ros.engine.observation.observation import Observation
from oxygen_ros.engine.text.tokenizer import ByteTokenizer

_MODEL = None


def tiny():
    global _MODEL
    if _MODEL is None:
        _MODEL = build_random_model(TINY)
    return _MODEL, ByteTokenizer()


def observation(i: int, cameras: int = 2) -> Observation:
    rng = np.random.default_rng(1000 + i)
    slots = TINY.camera_slots[:cameras]
    sizes = [(48, 64), (32, 32), (40, 40)]
    images = {s: rng.integers(0, 256, (*sizes[j], 3), dtype=np.uint8) for j, s in enumerate(slots)}
    return Observation(images=images, state=rng.uniform(-1, 1, 8), instruction="pick up the cup")
