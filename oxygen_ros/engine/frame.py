"""What one control frame produced, and its timing split.

A frame has two halves (engine/scheduler.py): `act` (vision, prefill, action expert)
hands the action chunk out, `talk` (admission, decode) finishes the frame. `ChunkResult`
is what the first half gives; `timings_ms["chunk"]` is when it was ready, from the frame's
start: the earliest a caller can publish the chunk.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .requests import TextDelta

PHASES = ("vision", "prefill", "action", "admit", "decode")


@dataclass
class FrameResult:
    frame_index: int
    actions: np.ndarray                     # [horizon, action_dim]
    deltas: list[TextDelta] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)   # PHASES + "chunk" + "total"
    expert_actions: dict[str, np.ndarray] = field(default_factory=dict)   # the further experts' chunks
    decode_steps: int = 0
    live_requests: int = 0
    queued_requests: int = 0
    tokens_emitted: int = 0
    kv_bytes_in_use: int = 0

    @property
    def finished(self) -> list[TextDelta]:
        return [d for d in self.deltas if d.done]


@dataclass
class ChunkResult:
    frame_index: int
    actions: np.ndarray                     # [horizon, action_dim], the model's space
    timings_ms: dict[str, float] = field(default_factory=dict)   # phases so far + "chunk"
    # a model with several action experts on its prefix: the further experts' chunks by
    # name (their phases "action:<name>", ready at "chunk:<name>")
    expert_actions: dict[str, np.ndarray] = field(default_factory=dict)


class PhaseTimer:
    """Accumulates wall time per phase: `with timer("decode"): ...`."""

    def __init__(self):
        self.ms = {p: 0.0 for p in PHASES}
        self._t0 = time.perf_counter()
        self._phase = None
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> float:
        """Record the time since the frame started under `name` (ms); returns it."""
        self.marks[name] = (time.perf_counter() - self._t0) * 1e3
        return self.marks[name]

    def __call__(self, phase: str):
        self._phase = phase
        return self

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.ms[self._phase] = self.ms.get(self._phase, 0.0) + (time.perf_counter() - self._start) * 1e3
        return False

    def result(self) -> dict[str, float]:
        return {**self.ms, **self.marks, "total": (time.perf_counter() - self._t0) * 1e3}
