"""How a session's observation becomes the engine's input and its chunk the reply's actions:
through a checkpoint's policy I/O (normalisation, prompt rules, unnormalised actions), or
as given (random-weight profiles, or a robot already in model space)."""
from __future__ import annotations

import numpy as np

from ..engine.observation.observation import Observation


class AsGiven:
    """Images, state and prompt straight into the engine's generic prefix rules; the
    model's actions as they come (float32)."""
    name = "as given (no checkpoint policy I/O)"

    def observation(self, images: dict, state: np.ndarray, prompt: str) -> Observation:
        return Observation(images=images, state=state, instruction=prompt)

    def actions(self, chunk, state) -> np.ndarray:
        return np.asarray(chunk, dtype=np.float32)


class ThroughPolicyIO:
    """A checkpoint's PolicyIO (engine/policy_io): its observation and action rules."""

    def __init__(self, io):
        self.io = io
        self.name = f"the checkpoint's policy I/O ({io.convention}, {io.normalization})"

    def observation(self, images: dict, state: np.ndarray, prompt: str) -> Observation:
        return self.io.observation(images, state, prompt)

    def actions(self, chunk, state) -> np.ndarray:
        return self.io.actions(chunk, state)
