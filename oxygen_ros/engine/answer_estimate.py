"""When a new question's answer would be complete, from the engine's backlog at the start of
the running frame (engine/admission.py) and the measured interval between frames, so the
service queues a question only while its deadline can be met (ROS-free, thread-safe).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from .admission import Backlog, frames_to_finish

SMOOTHING = 0.3          # weight of the newest frame interval in the running average


@dataclass(frozen=True)
class Estimate:
    seconds: float           # inf while no frame runs
    frames: int
    interval_s: float        # seconds per frame it assumes
    live: int                # requests decoding, and waiting for a slot, ahead of the question
    queued: int
    stalled: str = ""        # why no frame runs (then seconds is inf)

    def describe(self) -> str:
        if self.stalled:
            return f"no frame is running ({self.stalled})"
        return (f"about {self.frames} frame(s) of {self.interval_s:.2f} s = {self.seconds:.1f} s, "
                f"behind {self.live} decoding and {self.queued} waiting request(s)")


class AnswerEstimator:
    def __init__(self, period_s: float, clock=time.monotonic):
        self._period_s, self._clock = period_s, clock
        self._lock = threading.Lock()
        self._backlog: Backlog | None = None
        self._started = None             # when the running (or last) frame started
        self._gap_from = None            # the start the next frame's interval is measured from
        self._interval = period_s
        self.refused = 0
        self.last: Estimate | None = None

    def frame_started(self, backlog: Backlog) -> None:
        """The frame loop, right after handing the frame's requests to the engine."""
        now = self._clock()
        with self._lock:
            if self._gap_from is not None:
                gap = max(now - self._gap_from, self._period_s)
                self._interval = (1 - SMOOTHING) * self._interval + SMOOTHING * gap
            self._backlog, self._started, self._gap_from = backlog, now, now

    def no_frame(self) -> None:
        """A tick made no frame (inputs not usable, a failure): the gap until the next frame
        is a stall, not the frame rate, so it is not measured."""
        with self._lock:
            self._gap_from = None

    def estimate(self, tokens: int, ahead: list[int], stalled: str = "") -> Estimate:
        """Seconds until a question of `tokens` answer tokens, behind `ahead` (questions not
        handed to the engine yet), has its last token. `stalled`: why frames stopped, if they did."""
        with self._lock:
            backlog, started, interval = self._backlog, self._started, self._interval
        if backlog is None or started is None or stalled:
            est = Estimate(math.inf, 0, interval, 0, 0, stalled or "the first frame has not run yet")
        else:
            frames = frames_to_finish(backlog, tokens, ahead, admit_from=2)
            # frame 1 started at `started`; frame f ends by started + f * interval
            seconds = max(0.0, started + frames * interval - self._clock())
            est = Estimate(seconds, frames, interval, len(backlog.live), len(backlog.queued) + len(ahead))
        with self._lock:
            self.last = est
        return est

    def note_refused(self) -> None:
        with self._lock:
            self.refused += 1
