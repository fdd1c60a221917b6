"""Can this machine hold the replanning rate? Measured on the node's own frames (ROS-free).

The first frames of a run are slower (allocations, caches, lazy initialisation), so the
check skips `warmup` frames, then judges the median of the next `frames` whole frame
times (tick to frame end) against the period; afterwards it keeps judging a sliding window
of the same size, so a rate that stops holding later is reported too.
"""
from __future__ import annotations

import collections
import statistics


class RateCheck:
    def __init__(self, period_s: float, warmup: int = 2, frames: int = 5):
        self.period_s = period_s
        self.warmup, self.frames = warmup, frames
        self._seen = 0
        self._window: collections.deque[float] = collections.deque(maxlen=frames)

    def observe(self, frame_s: float) -> None:
        self._seen += 1
        if self._seen > self.warmup:
            self._window.append(frame_s)

    @property
    def measured(self) -> bool:
        return len(self._window) == self.frames

    @property
    def frame_s(self) -> float | None:
        """Median frame time of the window (None until it is full)."""
        return statistics.median(self._window) if self.measured else None

    @property
    def holdable_hz(self) -> float | None:
        """The replanning rate this machine holds by the window's median frame."""
        f = self.frame_s
        return None if f is None else 1.0 / f

    @property
    def holds(self) -> bool | None:
        """True/False once measured: whether the median frame fits the period."""
        f = self.frame_s
        return None if f is None else f <= self.period_s
