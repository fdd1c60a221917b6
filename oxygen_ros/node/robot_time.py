"""The node's robot-time state: the two rates, how chunks are stamped, RTC, the rate check.

ROS-free (the node passes ROS times in as float seconds). Two rates, never derived from
each other: the replanning rate (control_rate_hz, or "asap") is how often a new chunk is
computed; the action rate (the checkpoint's data rate) is how far apart a chunk's points
are. Every edge here returns a sentence for the node's log and counts itself for
/diagnostics; none raises during a frame.
"""
from __future__ import annotations

import collections
import time

import numpy as np

from ..engine.rtc import RTCConfig
from .chunk_plan import PlannedChunk
from .rate_check import RateCheck
from .rtc_planner import RTCPlanner

# A ROS clock that moved more (or less) than the monotonic clock by this much between a
# tick and its publication jumped (sim time reset, NTP step): observations are re-expressed
# on the new time line instead of stamping a chunk far in the past or future.
CLOCK_JUMP_S = 0.05
# An observation stamped this far before its tick (or CLOCK_JUMP_S after it) is not on the
# node's clock (inputs stamped with wall time while the node runs on sim time, a camera
# with its own clock): the tick's time stands in for it, and the mismatch is reported.
OFF_CLOCK_S = 10.0
PROBLEM_HOLD_S = 5.0  # how long a one-off problem (a jump, an expired chunk) stays in /diagnostics


def action_rate(p: dict, policy) -> tuple[float, str]:
    """(action rate in Hz, where it came from): the parameter, else the checkpoint's files."""
    if p["action_rate_hz"] > 0:
        return float(p["action_rate_hz"]), "parameter action_rate_hz"
    rate = getattr(policy, "action_rate_hz", None)
    if rate:
        return float(rate), f"checkpoint {policy.action_rate_source}"
    raise ValueError("action_rate_hz is 0 and the checkpoint's files do not say the rate of its actions: "
                     "set action_rate_hz to the rate of the training data (e.g. 50 for DROID/ALOHA-style "
                     "data, 10 or 20 for LIBERO); it is not the replanning rate control_rate_hz")


def check_rtc_mode(mode: str, cfg) -> None:
    """ValueError at configure when one of the model's action experts cannot run RTC mode
    `mode` (RTC applies to every expert: they are all flow models)."""
    if mode == "off":
        return
    heads = [("its action expert", cfg.expert)] + [(f"expert {e.name}", e.cfg) for e in cfg.extra_experts]
    for what, head in heads:
        if mode not in head.rtc_modes:
            raise ValueError(f"RTC mode {mode} is not available for the {head.head_name} "
                             f"head of model {cfg.name} ({what}: one flow time per chunk): use rtc_mode "
                             f"{' or '.join(head.rtc_modes)} or off")


def warm_up_rtc(engine, policy, config: RTCConfig, instruction: str, state_dims: int) -> float:
    """Run the RTC path (every expert's) twice on a blank observation (at configure): its
    first backward passes are several times slower (autograd and allocator set-up), which in the control
    loop would make the first guided chunks late, even expire. Returns the second run's ms."""
    from ..engine.rtc import RTCGuide

    cfg = engine.model.cfg
    size, horizon = cfg.vision.image_size, cfg.expert.horizon
    obs = policy.observation({cfg.camera_slots[0]: np.zeros((size, size, 3), np.uint8)},
                             np.zeros(state_dims), instruction)
    guide = RTCGuide(config, np.zeros((horizon, policy.action_dims), np.float32), delay=max(1, horizon // 4))
    experts = {e.name: RTCGuide(config, np.zeros((e.cfg.horizon, e.cfg.action_dim), np.float32),
                                delay=max(1, e.cfg.horizon // 4)) for e in cfg.extra_experts}
    engine.warm_up(obs, guide, experts)
    return engine.warm_up(obs, guide, experts)


def rtc_config(p: dict) -> RTCConfig:
    return RTCConfig(mode=p["rtc_mode"], schedule=p["rtc_schedule"], beta=p["rtc_beta"],
                     execution_horizon=p["rtc_execution_horizon"])


class RobotTime:
    def __init__(self, action_rate_hz: float, action_rate_source: str, replanning: str, period_s: float,
                 rtc: RTCPlanner, chunk_points: int, horizon: int):
        if replanning not in ("rate", "asap"):
            raise ValueError(f"replanning must be rate or asap, got {replanning!r}")
        self.action_rate_hz, self.action_rate_source = action_rate_hz, action_rate_source
        self.action_dt = 1.0 / action_rate_hz
        self.replanning, self.period_s = replanning, period_s
        self.rtc = rtc
        self.rate = RateCheck(period_s)
        self.horizon = horizon
        self.chunk_span_s = min(chunk_points or horizon, horizon) * self.action_dt
        self.configure_warnings = []
        if replanning == "rate" and self.chunk_span_s < period_s:
            self.configure_warnings.append(
                f"a chunk spans {self.chunk_span_s * 1e3:.0f} ms ({min(chunk_points or horizon, horizon)} points "
                f"at {action_rate_hz:g} Hz), shorter than the {period_s * 1e3:.0f} ms replanning period: "
                "the arm would stop between chunks. Raise control_rate_hz or chunk_points, or check "
                "action_rate_hz")
        self.latencies_ms: collections.deque[float] = collections.deque(maxlen=50)
        self.points_dropped = 0        # chunk points already past at publication
        self.chunks_expired = 0        # chunks whose every point was past: not published
        self.clock_jumps = 0
        self.stamps_off_clock = 0      # observations whose stamp is not on the node's clock
        self.rate_warned = False
        self.starve_warned = False
        self.last_problem, self._problem_at = "", -1e9
        self.rtc_note = ""

    def _report(self, text: str) -> None:
        self.last_problem, self._problem_at = text, time.monotonic()

    @classmethod
    def from_params(cls, p: dict, policy, horizon: int, period_s: float) -> "RobotTime":
        rate, source = action_rate(p, policy)
        config = rtc_config(p)
        return cls(rate, source, p["replanning"], period_s, RTCPlanner(config, policy, rate, horizon),
                   p["chunk_points"], horizon)

    @property
    def replanning_text(self) -> str:
        return "asap" if self.replanning == "asap" else f"at {1 / self.period_s:g} Hz"

    def activated(self) -> None:
        self.rtc.reset()

    # -- a frame ----------------------------------------------------------------------------
    def rtc_guide(self, obs_stamp_s: float, state):
        """(RTCGuide or None, a note for the log: plain sampling and why, or a clamped delay)."""
        guide, note = self.rtc.guide(obs_stamp_s, state)
        if note:
            self.rtc_note = note
        return guide, note

    def observation_time(self, obs_s: float, tick_s: float, publish_s: float,
                         elapsed_mono_s: float) -> tuple[float, str]:
        """The observation's time on the clock at publication, and a log line when the ROS
        clock jumped between the tick and now (then the observation keeps its age at the
        tick, re-expressed on the new time line) or when its stamp is not on the node's
        clock at all (then it counts as taken at the tick)."""
        if obs_s > tick_s + CLOCK_JUMP_S or tick_s - obs_s > OFF_CLOCK_S:
            self.stamps_off_clock += 1
            self._report(f"observation stamped {obs_s - tick_s:+.3f} s from the node's clock (inputs "
                         "on another clock? use_sim_time on one side only?): the chunk is stamped at the "
                         "tick instead")
            obs_s = tick_s
            note = f"{self.last_problem} ({self.stamps_off_clock} so far)"
        else:
            note = ""
        elapsed_ros = publish_s - tick_s
        # a clock that stood still is a paused sim clock (a lock-step sim waits for this chunk),
        # not a jump: the chunk keeps its observation's stamp
        if elapsed_ros == 0.0 or abs(elapsed_ros - elapsed_mono_s) <= max(CLOCK_JUMP_S, 0.5 * elapsed_mono_s):
            return obs_s, note
        self.clock_jumps += 1
        moved = obs_s + elapsed_ros - elapsed_mono_s
        self._report(f"ROS clock jumped by {elapsed_ros - elapsed_mono_s:+.3f} s between the observation "
                     "and the chunk's publication: the chunk is stamped on the new time line")
        return moved, f"{self.last_problem} ({self.clock_jumps} so far)"

    def chunk_sent(self, planned: PlannedChunk, positions, latency_s: float) -> str:
        """Account for a planned chunk at publication; returns an error line when nothing of
        it is left to send (every point already past), else ""."""
        latency_s = max(0.0, latency_s)
        self.latencies_ms.append(latency_s * 1e3)
        self.points_dropped += planned.dropped
        if planned.empty:
            self.chunks_expired += 1
            self._report(f"chunk not published: its last point was due before publication "
                         f"(latency {latency_s * 1e3:.0f} ms > chunk span {self.chunk_span_s * 1e3:.0f} ms)")
            return f"{self.last_problem} ({self.chunks_expired} so far)"
        self.rtc.published(planned.stamp_s, positions, latency_s)
        return ""

    def starved_s(self) -> float | None:
        """How long the arm waits between chunks (s): a chunk's last point is due at
        (points - 1) / rate after its observation, the next chunk arrives a period plus its
        latency after that observation. None before the rate check has measured; 0 when
        chunks overlap."""
        if not self.rate.measured or not self.latencies_ms:
            return None
        period = self.period_s if self.replanning == "rate" else self.rate.frame_s
        latency = float(np.median(self.latencies_ms)) / 1e3
        return max(0.0, period + latency - (self.chunk_span_s - self.action_dt))

    def frame_done(self, frame_s: float) -> str:
        """Feed the rate check a whole frame's time; a warning line the first time the
        measured frames show that the replanning rate cannot be held, or that the arm runs
        out of each chunk before the next one lands."""
        self.rate.observe(frame_s)
        starved = self.starved_s()
        if starved and not self.starve_warned:
            self.starve_warned = True
            return (f"the arm runs out of each chunk {starved * 1e3:.0f} ms before the next one lands "
                    f"(chunk {self.chunk_span_s * 1e3:.0f} ms < period {self.period_s * 1e3:.0f} ms + "
                    f"latency {np.median(self.latencies_ms):.0f} ms): raise control_rate_hz or chunk_points, "
                    "or check action_rate_hz")
        if self.replanning != "rate" or self.rate.holds is not False:
            if self.rate.holds:
                self.rate_warned = False
            return ""
        if self.rate_warned:
            return ""
        self.rate_warned = True
        hz = self.rate.holdable_hz
        return (f"control_rate_hz {1 / self.period_s:g} cannot be held: frames take "
                f"{self.rate.frame_s * 1e3:.0f} ms (median of {self.rate.frames} after {self.rate.warmup} "
                f"warm-up frames); this machine holds about {hz:.2f} Hz: set control_rate_hz <= {hz:.2f} "
                "or replanning: asap")

    # -- /diagnostics ---------------------------------------------------------------------------
    def diagnostics(self) -> dict:
        lat = sorted(self.latencies_ms)
        hz = self.rate.holdable_hz
        problems = list(self.configure_warnings)
        starved = self.starved_s()
        if starved:
            problems.append(f"the arm waits {starved * 1e3:.0f} ms between chunks")
        if self.rate.holds is False and self.replanning == "rate":
            problems.append(f"control_rate_hz {1 / self.period_s:g} not held (about {hz:.2f} Hz)")
        if self.last_problem and time.monotonic() - self._problem_at <= PROBLEM_HOLD_S:
            problems.append(self.last_problem)
        return {
            "problems": problems,
            "values": {
                "replanning": self.replanning_text, "action_rate_hz": self.action_rate_hz,
                "action_rate_source": self.action_rate_source, "chunk_span_s": self.chunk_span_s,
                "chunk_latency_ms_last": self.latencies_ms[-1] if lat else 0.0,
                "chunk_latency_ms_p95": float(np.percentile(lat, 95)) if lat else 0.0,
                "points_dropped": self.points_dropped, "chunks_expired": self.chunks_expired,
                "clock_jumps_at_publish": self.clock_jumps, "stamps_off_clock": self.stamps_off_clock,
                "rate_holdable_hz": hz if hz is not None else "measuring",
                "arm_waits_between_chunks_ms": starved * 1e3 if starved is not None else "measuring",
                "rtc_mode": self.rtc.config.mode, "rtc_delay_steps": self.rtc.last_delay,
                "rtc_guided_chunks": self.rtc.guided_chunks,
                "rtc_plain_chunks": self.rtc.plain_chunks, "rtc_input_gaps": self.rtc.input_gaps,
                "rtc_delays_clamped": self.rtc.clamped,
                "rtc_last_note": self.rtc_note or "none",
            },
        }
