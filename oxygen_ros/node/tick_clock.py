"""Control ticks on the monotonic clock that never burst to catch up.

Ticks are due at start + n * period. After a frame, the next frame runs at the next
tick still ahead, or at once if the latest tick that fell due is late by no more than
`grace_s` (half a period by default: a frame that ends just past a tick boundary costs
a little latency, not a whole tick). Ticks older than that are skipped and counted, so
a slow frame costs the ticks it overlapped, never a burst of back-to-back frames.
"""
from __future__ import annotations

import math
import threading
import time


class TickClock:
    def __init__(self, period_s: float, grace_s: float | None = None, clock=time.monotonic):
        if not period_s > 0:
            raise ValueError(f"tick period must be positive, got {period_s}")
        self.period_s = period_s
        self.grace_s = 0.5 * period_s if grace_s is None else grace_s
        self._clock = clock
        self.next_tick = clock()
        self.skipped = 0               # ticks skipped because a frame overran them

    def wait(self, stop: threading.Event) -> bool:
        """Sleep until the next tick is due; False when `stop` was set meanwhile."""
        delay = self.next_tick - self._clock()
        if delay > 0:
            return not stop.wait(delay)
        return not stop.is_set()

    def restart(self) -> None:
        """Ticks from now on: the next one is due at once."""
        self.next_tick = self._clock()

    def advance(self) -> int:
        """Move to the tick to run next; returns how many ticks were skipped."""
        self.next_tick += self.period_s
        now = self._clock()
        late = now - self.next_tick
        if late <= 0:
            return 0
        missed = math.floor(late / self.period_s)      # due ticks before the latest one
        self.next_tick += missed * self.period_s       # the latest tick that fell due
        if now - self.next_tick > self.grace_s:        # too late for it as well
            missed += 1
            self.next_tick += self.period_s
        self.skipped += missed
        return missed
