"""Real-Time Chunking (RTC): what a new chunk is guided with, and the delay it is guided over.

While a chunk is inferred the robot keeps executing the previous chunk; the new chunk must
continue what is executed meanwhile (Black, Galliker, Levine, arXiv 2506.07339). Two modes:
- "guided" (training-free, the paper's): every denoise step pulls the clean estimate of
  the new chunk toward the previous chunk's remainder under a soft mask (layers/rtc_guidance.py);
- "trained" (arXiv 2512.05964, LeRobot's mode="trained"): the first `delay` action tokens
  are the previous chunk's (clean, flow time 0) at every step; needs a checkpoint trained so.
ROS-free: torch only. The time convention is the engine's: flow time t from 1 (noise) to 0.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

MODES = ("off", "guided", "trained")
SCHEDULES = ("exp", "linear", "ones", "zeros")


@dataclass(frozen=True)
class RTCConfig:
    """mode: off | guided | trained. schedule: the soft mask's shape after the delay.
    beta: the cap on the guidance weight (LeRobot's max_guidance_weight).
    execution_horizon: as in LeRobot, the END of the guided region counted from the new
    chunk's start (the paper's H - s, not its s): rows from it on are not guided."""
    mode: str = "off"
    schedule: str = "exp"
    beta: float = 10.0
    execution_horizon: int = 10

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"RTC mode must be one of {MODES}, got {self.mode!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"RTC schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) \
                or not math.isfinite(self.beta) or self.beta < 0:
            raise ValueError(f"RTC beta (max guidance weight) must be a finite number >= 0, got {self.beta!r}")
        if isinstance(self.execution_horizon, bool) or not isinstance(self.execution_horizon, int) \
                or self.execution_horizon < 0:
            raise ValueError(f"RTC execution_horizon must be an int >= 0, got {self.execution_horizon!r}")


def prefix_weights(delay: int, end: int, horizon: int, schedule: str) -> torch.Tensor:
    """The soft mask W [horizon] (float32): 1 for i < delay, a ramp decaying over
    delay <= i < end, 0 from end on. The ramp is kinetix's get_prefix_weights:
    linear (end - i) / (end - delay + 1), exp w (e^w - 1) / (e - 1) of it; "ones" is 1
    up to end, "zeros" 1 over the delay only. `end` is clamped into [delay, horizon] so
    the delayed rows, which the robot executes for certain, are always fully guided."""
    if schedule not in SCHEDULES:
        raise ValueError(f"RTC schedule must be one of {SCHEDULES}, got {schedule!r}")
    delay = min(max(int(delay), 0), horizon)
    end = min(max(int(end), delay), horizon)
    i = torch.arange(horizon, dtype=torch.float32)
    if schedule == "ones":
        w = torch.ones(horizon)
    elif schedule == "zeros":
        w = torch.zeros(horizon)
    else:
        w = ((end - i) / (end - delay + 1)).clamp(0.0, 1.0)
        if schedule == "exp":
            w = w * torch.expm1(w) / (math.e - 1)
    w[:delay] = 1.0
    w[end:] = 0.0
    return w


def guidance_weight(t: float, beta: float) -> float:
    """The paper's guidance weight min(beta, (1 - tau)/tau * (tau^2 + (1 - tau)^2)/(1 - tau)^2)
    with tau = 1 - t (the paper's time runs from 0 = noise to 1 = data; kinetix
    realtime_action, LeRobot RTCProcessor), i.e. (t^2 + (1 - t)^2) / (t (1 - t)); it is
    unbounded at both ends (t = 1 at the first step), where the cap beta applies."""
    if t <= 0.0 or t >= 1.0:
        return float(beta)
    return min(float(beta), (t * t + (1.0 - t) ** 2) / (t * (1.0 - t)))


@dataclass
class RTCGuide:
    """What one chunk is guided with.

    prefix [n, <= action_dim] in model space (normalised): row i is what the robot
    executes at the new chunk's step i (the previous chunk's remainder on the new time
    base, re-anchored to the new state for delta actions); n may be below the horizon.
    Rows past n and columns past its width are not guided (weight 0): the target is never
    zero-padded, since a zero in normalised space is the dataset mean.
    delay: the steps executed for certain before the new chunk arrives.
    """
    config: RTCConfig
    prefix: torch.Tensor
    delay: int

    def __post_init__(self):
        if isinstance(self.prefix, np.ndarray):
            self.prefix = torch.from_numpy(np.ascontiguousarray(self.prefix))
        elif not isinstance(self.prefix, torch.Tensor):
            self.prefix = torch.as_tensor(self.prefix)
        if self.prefix.dim() != 2 or not self.prefix.is_floating_point():
            raise ValueError(f"RTC prefix must be a float [n, action_dim] array, got "
                             f"{self.prefix.dtype} shape {tuple(self.prefix.shape)}")
        if isinstance(self.delay, bool) or not isinstance(self.delay, (int, np.integer)) or self.delay < 0:
            raise ValueError(f"RTC delay must be an int >= 0, got {self.delay!r}")
        self.delay = int(self.delay)

    @property
    def rows(self) -> int:
        return self.prefix.shape[0]

    def weights(self, horizon: int) -> torch.Tensor:
        """W [horizon]: prefix_weights over the chunk, 0 on rows past the prefix."""
        w = prefix_weights(self.delay, self.config.execution_horizon, horizon, self.config.schedule)
        w[self.rows:] = 0.0
        return w

    def hard_rows(self, horizon: int) -> int:
        """Trained mode: the rows set to the prefix (the delay, at most the prefix's rows)."""
        return min(self.delay, self.rows, horizon)

    def active(self, horizon: int) -> bool:
        """Whether this guide changes anything: off, or nothing to guide, is plain sampling."""
        if self.config.mode == "guided":
            return bool(self.weights(horizon).any())
        if self.config.mode == "trained":
            return self.hard_rows(horizon) > 0
        return False


class DelayEstimator:
    """The inference delay in control steps, from measured chunk latencies.

    The estimate is the max over the last `window` latencies (a delay too short lets the
    new chunk disagree with what the robot already executed, so it errs long), leaving out
    the first `warmup` samples once a later one exists: the first frames run slower
    (compilation, cold caches), and a cold-start spike kept in the max would set the delay
    for the whole window (lerobot issue #2541). Before any later sample the warm-up ones
    are all there is, and they are used.
    """

    def __init__(self, window: int = 10, warmup: int = 2):
        if window < 1 or warmup < 0:
            raise ValueError(f"DelayEstimator needs window >= 1 and warmup >= 0, got {window}, {warmup}")
        self.warmup = warmup
        self._early: list[float] = []
        self._recent: deque[float] = deque(maxlen=window)

    def observe(self, latency_s: float) -> None:
        latency_s = float(latency_s)
        if not math.isfinite(latency_s) or latency_s < 0:
            raise ValueError(f"latency must be a finite number of seconds >= 0, got {latency_s!r}")
        (self._early if len(self._early) < self.warmup else self._recent).append(latency_s)

    @property
    def estimate_s(self) -> float | None:
        """The latency the delay is planned with (seconds); None before any sample."""
        samples = self._recent or self._early
        return max(samples) if samples else None

    def delay_steps(self, action_rate_hz: float) -> int:
        """ceil(estimate x rate); 0 before any sample. The 1e-9 keeps a product such as
        0.3 s x 10 Hz = 3.0000000000000004 from rounding up to 4."""
        estimate = self.estimate_s
        if estimate is None:
            return 0
        return max(0, math.ceil(estimate * action_rate_hz - 1e-9))
