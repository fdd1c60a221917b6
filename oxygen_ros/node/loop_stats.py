"""Counters and rates of the control loop, for /diagnostics (ROS-free, thread-safe)."""
from __future__ import annotations

import collections
import threading
import time
from typing import Callable


def _inputs_usable() -> str:
    return ""


class LoopStats:
    def __init__(self, inputs_unusable: Callable[[], str] = _inputs_usable, window_s: float = 5.0,
                 clock=time.monotonic):
        """inputs_unusable() -> why the robot's inputs cannot make a frame now ("" when they
        can): a stall the next tick would find, known before it runs."""
        self._inputs_unusable = inputs_unusable
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._frames = collections.deque()      # (end time, total_ms, tokens)
        self.frames = 0
        self.deadline_misses = 0
        self.skipped_ticks = 0
        self.no_chunk_ticks = 0
        self.frame_errors = 0
        self.robot_faults = 0                   # exceptions in this robot's policy I/O or publishing
        self.last = {}                          # latest frame's engine figures
        self.problem = ("", -1e9)               # latest reason a tick produced no chunk
        self._stall = ("", -1e9)                # the same, leaving out waits for the next observation
        self.clipped_points = 0                 # published chunk points clipped into the joint limits
        self._last_at = None

    def frame(self, total_ms: float, missed: bool, tokens: int, **latest) -> None:
        with self._lock:
            now = self._clock()
            self._frames.append((now, total_ms, tokens))
            self._last_at = now
            self.frames += 1
            self.deadline_misses += int(missed)
            self.last = latest
            self._trim(now)

    def stalled(self) -> str:
        """Why frames are not running now ("" while they run): the latest reason a tick made no
        chunk, if it is more recent than the last frame (a waiting question asks this). Waiting
        for a new observation (new_observations_only: a lock-step sim between its steps) is
        how such a robot runs, not a stall. Before the next tick notices, inputs that cannot
        make a frame now (stale, missing) are a stall too: a question asked then is refused
        at once, naming them, instead of queued behind frames that will not run."""
        with self._lock:
            (reason, at), last = self._stall, self._last_at
        if reason and (last is None or at > last):
            return reason
        return self._inputs_unusable()

    def clipped(self, points: int) -> int:
        """Count chunk points clipped into the joint limits; the count so far."""
        with self._lock:
            self.clipped_points += points
            return self.clipped_points

    def skipped(self, ticks: int) -> None:
        with self._lock:
            self.skipped_ticks += ticks

    def no_chunk(self, reason: str, error: bool = False, waiting: bool = False) -> None:
        """A tick made no chunk; `waiting`: only because no new observation came yet."""
        with self._lock:
            self.no_chunk_ticks += 1
            self.frame_errors += int(error)
            self.problem = (reason, self._clock())
            if not waiting:
                self._stall = self.problem

    def fault(self, reason: str, chunk_lost: bool) -> None:
        """An exception confined to this robot (its policy I/O or a publisher); `chunk_lost`:
        its tick produced no chunk because of it."""
        if chunk_lost:
            self.no_chunk(reason, error=True)
        with self._lock:
            self.robot_faults += 1

    def _trim(self, now: float) -> None:
        while self._frames and now - self._frames[0][0] > self.window_s:
            self._frames.popleft()

    def engine_figures(self) -> dict:
        """The latest frame's language figures from the engine."""
        last = self.last
        return {"live_requests": last.get("live_requests", 0), "queued_requests": last.get("queued_requests", 0),
                "kv_bytes_in_use": last.get("kv_bytes_in_use", 0)}

    def snapshot(self) -> dict:
        with self._lock:
            now = self._clock()
            self._trim(now)
            n = len(self._frames)
            rate = 0.0
            if n > 1:
                first, last = self._frames[0][0], self._frames[-1][0]
                gap = (last - first) / (n - 1)
                # frames that stopped arriving report 0 Hz, not the rate they had
                rate = 1.0 / gap if gap > 0 and now - last < max(1.0, 3 * gap) else 0.0
            lat = [f[1] for f in self._frames]
            reason, at = self.problem
            return {
                "frames": self.frames,
                "frame_rate_hz": rate,
                "latency_ms_mean": sum(lat) / n if n else 0.0,
                "latency_ms_max": max(lat) if n else 0.0,
                "tokens_per_s": sum(f[2] for f in self._frames) / self.window_s,
                "deadline_misses": self.deadline_misses,
                "skipped_ticks": self.skipped_ticks,
                "no_chunk_ticks": self.no_chunk_ticks,
                "frame_errors": self.frame_errors,
                "robot_faults": self.robot_faults,
                "clipped_points": self.clipped_points,
                "problem": reason,
                "problem_age_s": now - at,
                **self.last,
            }
