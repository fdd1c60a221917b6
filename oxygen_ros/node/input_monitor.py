"""The latest value of every sensor input, its age, and what is wrong with the inputs.

ROS-free and thread-safe: subscription callbacks `accept` or `reject` messages, the
control loop takes a `snapshot`. Ages run on the monotonic clock from the moment a
message arrived, plus the transport latency measured on arrival (ROS time minus the
header stamp), so a jump of ROS time after arrival never makes an input look fresh.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class _Input:
    value: object = None
    stamp_ns: int = 0              # header stamp of the latest accepted message
    received: float = 0.0          # monotonic arrival time
    latency_s: float = 0.0         # ROS time minus header stamp on arrival
    accepted: int = 0
    rejected: int = 0
    problem: str = ""              # latest rejection reason
    problem_at: float = -1e9
    previous: tuple | None = None  # (value, stamp_ns, received, latency_s) accepted before value


@dataclass
class Snapshot:
    values: dict                   # input name -> latest accepted value (only inputs that have one)
    ages: dict                     # input name -> age in seconds (None: never received)
    stamp_ns: int                  # oldest header stamp among the inputs
    problems: list[str] = field(default_factory=list)   # stale, missing, recently rejected, clock
    usable: bool = False           # every input present and younger than the age limit

    @property
    def unusable(self) -> str:
        """Why these inputs cannot make a frame ("" when they can)."""
        return "" if self.usable else "; ".join(self.problems) or "inputs not usable"

    @property
    def max_age(self) -> float | None:
        ages = [a for a in self.ages.values() if a is not None]
        return max(ages) if ages else None


class InputMonitor:
    def __init__(self, names, max_age_s: float, hold_s: float = 3.0, clock=time.monotonic):
        self._inputs = {n: _Input() for n in names}
        self.max_age_s = max_age_s
        self.hold_s = hold_s                  # how long a rejection stays in the problem list
        self._clock = clock
        self._lock = threading.Lock()
        self._last_tick = (None, 0.0)         # (ROS ns, monotonic s) of the latest tick
        self.clock_jumps = 0
        self._clock_problem = ("", -1e9)

    def accept(self, name: str, value, stamp_ns: int = 0, latency_s: float = 0.0) -> None:
        with self._lock:
            i = self._inputs[name]
            if i.value is not None:
                i.previous = (i.value, i.stamp_ns, i.received, i.latency_s)
            i.value, i.stamp_ns, i.latency_s = value, stamp_ns, max(0.0, latency_s)
            i.received = self._clock()
            i.accepted += 1

    def reject(self, name: str, problem: str) -> None:
        with self._lock:
            i = self._inputs[name]
            i.rejected += 1
            i.problem, i.problem_at = problem, self._clock()

    def discard(self, name: str, value, problem: str) -> None:
        """Reject an accepted value found bad later (an image that does not decode): the value
        accepted before it becomes the latest again (with its own age), if there was one."""
        with self._lock:
            i = self._inputs[name]
            if i.value is value:
                i.value, i.stamp_ns, i.received, i.latency_s = i.previous or (None, 0, 0.0, 0.0)
                i.previous = None
                i.accepted -= 1
        self.reject(name, problem)

    def note_ros_time(self, now_ns: int) -> float:
        """Record the ROS time of a tick; returns how far it jumped (negative: back; 0.0 if it
        did not). Forward, a jump is ROS time gaining more than max_age_s on the monotonic
        clock since the last tick (less is a sim faster than real time, a slewing clock).
        Every input received so far then ages by that gain: on the new time line it is that
        much older, and a chunk from it would be stamped that far in the past (without this,
        a jump between max_age_s and the chunk's span let a stale observation act).
        ROS time 0 is a sim clock that has not started: nothing to compare with."""
        if now_ns == 0:
            return 0.0
        with self._lock:
            mono = self._clock()
            (last, last_mono), self._last_tick = self._last_tick, (now_ns, mono)
            if last is None:
                return 0.0
            jump = (now_ns - last) / 1e9
            if jump >= 0:
                jump -= mono - last_mono
                if jump <= self.max_age_s:
                    return 0.0
                for i in self._inputs.values():
                    i.latency_s += jump
                    if i.previous is not None:
                        i.previous = (*i.previous[:3], i.previous[3] + jump)
            self.clock_jumps += 1
            self._clock_problem = (f"ROS time jumped {'back' if jump < 0 else 'forward'} by {abs(jump):.3f} s",
                                   mono)
            return jump

    def counts(self) -> dict:
        with self._lock:
            return {n: (i.accepted, i.rejected) for n, i in self._inputs.items()}

    def unusable(self) -> str:
        """Why the inputs cannot make a frame now ("" when they can)."""
        return self.snapshot().unusable

    def snapshot(self) -> Snapshot:
        with self._lock:
            now = self._clock()
            values, ages, problems, stamps = {}, {}, [], []
            for name, i in self._inputs.items():
                if i.value is None:
                    ages[name] = None
                    problems.append(f"{name}: no data received yet" if i.accepted + i.rejected == 0
                                    else f"{name}: no usable data (the latest was rejected)")
                else:
                    values[name] = i.value
                    ages[name] = age = now - i.received + i.latency_s
                    stamps.append(i.stamp_ns)
                    if age > self.max_age_s:
                        problems.append(f"{name}: stale, age {age:.2f} s > max_observation_age_s {self.max_age_s:.2f}")
                if now - i.problem_at <= self.hold_s:
                    problems.append(f"{name}: rejected {i.rejected} message(s), latest: {i.problem}")
            usable = len(values) == len(self._inputs) and all(a <= self.max_age_s for a in ages.values())
            text, at = self._clock_problem
            if now - at <= self.hold_s:
                problems.append(f"{text} ({self.clock_jumps} jump(s) so far)")
            return Snapshot(values, ages, min(stamps) if stamps else 0, problems, usable)
