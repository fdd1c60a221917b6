"""What each new chunk is guided to continue (Real-Time Chunking), ROS-free.

While a chunk is inferred the robot keeps executing the previous one. The planner keeps
the last published chunk and, for a new observation stamped t, hands the engine the
previous chunk's remainder on the new chunk's time base (its rows at t + i / rate) in the
model's space: mapped back through the policy I/O with the NEW state, so delta actions
are re-anchored to the new observation (a remainder anchored to the old state would pull
the new chunk off by the state change). The delay d is the number of those rows the
robot is certain to execute before the new chunk arrives: measured chunk latencies
(engine.rtc.DelayEstimator, robust to the cold start) times the action rate, clamped to
the rows that remain.

Nothing to continue (first chunk after activation, or the previous chunk ended before
the new observation: an input gap) means plain sampling, with the reason returned.
"""
from __future__ import annotations

import numpy as np

from ..engine.rtc import DelayEstimator, RTCConfig, RTCGuide
from .chunk_plan import PublishedChunk


class RTCPlanner:
    def __init__(self, config: RTCConfig, policy, action_rate_hz: float, horizon: int,
                 estimator: DelayEstimator | None = None):
        self.config, self.policy = config, policy
        self.rate, self.horizon = action_rate_hz, horizon
        self.estimator = estimator or DelayEstimator()
        self.previous: PublishedChunk | None = None
        self.plain_chunks = 0        # chunks sampled without guidance while RTC is on
        self.input_gaps = 0          # of those, after an input gap (the previous chunk had ended)
        self.guided_chunks = 0       # chunks guided to continue the previous one
        self.clamped = 0             # delays cut to the previous chunk's remainder
        self.last_delay = 0

    @property
    def enabled(self) -> bool:
        return self.config.mode != "off"

    def reset(self) -> None:
        """Forget the previous chunk (activation): the next one starts fresh."""
        self.previous = None

    def guide(self, obs_stamp_s: float, state) -> tuple[RTCGuide | None, str]:
        """(the guide for a chunk from this observation, or None; a note for the log:
        why sampling is plain, or that the delay was clamped; "" when nothing to say)."""
        if not self.enabled:
            return None, ""
        self.last_delay = 0
        prev = self.previous
        if prev is None:
            self.plain_chunks += 1
            return None, "first chunk after activation: nothing to continue, plain sampling"
        positions = prev.remainder(obs_stamp_s, self.horizon)
        n = len(positions)
        if n == 0:
            self.plain_chunks += 1
            self.input_gaps += 1
            return None, (f"input gap: the previous chunk ended {obs_stamp_s - prev.end_s:.3f} s before "
                          "this observation; nothing to continue, plain sampling")
        wanted = self.estimator.delay_steps(self.rate) or 0
        delay, note = wanted, ""
        if wanted > n:
            delay = n
            self.clamped += 1
            note = (f"measured delay {wanted} steps is beyond the {n} left of the previous chunk: "
                    f"clamped to {n}")
        # the robot's action dims only: the model's extra (padding) dims are left unguided
        target = np.asarray(self.policy.model_actions(positions, state), np.float32)
        self.last_delay = delay
        self.guided_chunks += 1
        return RTCGuide(self.config, target, delay), note

    def published(self, stamp_s: float, positions: np.ndarray, latency_s: float) -> None:
        """Record a chunk as sent (its whole [H, J] positions, stamp = action 0's time) and
        the latency from its observation to its publication."""
        self.previous = PublishedChunk(stamp_s, 1.0 / self.rate, np.asarray(positions, np.float64))
        self.estimator.observe(latency_s)
