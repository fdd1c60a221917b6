"""Control ticks on the monotonic clock that never burst to catch up.

Ticks are due at start + n * period. After a frame, the next tick is the first one
still in the future: ticks that passed while a frame overran are skipped and counted,
so a slow frame costs the ticks it overlapped, not a burst of back-to-back frames.
"""
from __future__ import annotations

import math
import threading
import time


class TickClock:
    def __init__(self, period_s: float, clock=time.monotonic):
        if not period_s > 0:
            raise ValueError(f"tick period must be positive, got {period_s}")
        self.period_s = period_s
        self._clock = clock
        self.next_tick = clock()
        self.skipped = 0               # ticks skipped because a frame overran them

    def wait(self, stop: threading.Event) -> bool:
        """Sleep until the next tick is due; False when `stop` was set meanwhile."""
        delay = self.next_tick - self._clock()
        if delay > 0:
            return not stop.wait(delay)
        return not stop.is_set()

    def advance(self) -> int:
        """Move to the next tick still ahead; returns how many ticks were skipped."""
        self.next_tick += self.period_s
        late = self._clock() - self.next_tick
        if late <= 0:
            return 0
        missed = math.floor(late / self.period_s) + 1
        self.next_tick += missed * self.period_s
        self.skipped += missed
        return missed
