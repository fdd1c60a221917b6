"""The node's /diagnostics: control loop, inputs, language and robot time, one DiagnosticStatus each.

`Diagnostics`, the timer's callback, asks each robot's parts for their figures; `build` makes the message.
"""
from __future__ import annotations

from typing import Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from .expert_outputs import rtc_figures
from .runtime import Runtime, Serving

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


def _status(name: str, hardware_id: str, level, message: str, values: dict) -> DiagnosticStatus:
    def fmt(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    return DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id,
                            values=[KeyValue(key=k, value=fmt(v)) for k, v in values.items()])


def build(node_name: str, stamp, state: str, model: str, loop: dict, inputs, counts: dict,
          language: dict, period_s: float, robot_time: dict | None = None) -> DiagnosticArray:
    """inputs: an InputMonitor.Snapshot; counts: input -> (accepted, rejected);
    loop: LoopStats.snapshot(); language: live/queued/KV/question figures; robot_time:
    RobotTime.diagnostics() (rates, chunk latency and stamping, RTC)."""
    active = state == "active"
    # control loop
    rate, lat = loop["frame_rate_hz"], loop["latency_ms_mean"]
    recent_problem = loop["problem"] and loop["problem_age_s"] <= max(2.0, 2 * period_s)
    if not active:
        level, msg = OK, f"{state}: not producing action chunks"
    elif recent_problem:
        level, msg = ERROR, f"no action chunk: {loop['problem']}"
    elif loop["latency_ms_max"] > period_s * 1e3:
        level, msg = WARN, f"{rate:.1f} Hz; frames overrun the {period_s * 1e3:.0f} ms period (max {loop['latency_ms_max']:.0f} ms)"
    else:
        level, msg = OK, f"{rate:.1f} Hz, frame latency {lat:.1f} ms"
    loop_values = {
        "state": state, "frame_rate_hz": rate, "target_rate_hz": 1.0 / period_s,
        "frame_latency_ms_mean": lat, "frame_latency_ms_max": loop["latency_ms_max"],
        "frames": loop["frames"], "deadline_misses": loop["deadline_misses"],
        "skipped_ticks": loop["skipped_ticks"], "ticks_without_chunk": loop["no_chunk_ticks"],
        "frame_errors": loop["frame_errors"],
        "robot_faults": loop["robot_faults"],     # policy I/O or publishing raised (this robot only)
        "decode_budget_steps": loop.get("decode_budget", 0),
        "decode_steps_last_frame": loop.get("decode_steps", 0),
        "chunk_points_clipped": loop.get("clipped_points", 0),   # by the joint-limit envelope
    }
    statuses = [_status(f"{node_name}: control loop", model, level, msg, loop_values)]

    # inputs
    age = inputs.max_age
    in_values = {"observation_age_s": age if age is not None else "none",
                 "clock_jumps": language.get("clock_jumps", 0)}
    for name, a in inputs.ages.items():
        acc, rej = counts.get(name, (0, 0))
        in_values[f"{name} age_s"] = a if a is not None else "none"
        in_values[f"{name} accepted"] = acc
        in_values[f"{name} rejected"] = rej
    if inputs.problems:
        statuses.append(_status(f"{node_name}: inputs", model, ERROR, "; ".join(inputs.problems), in_values))
    else:
        statuses.append(_status(f"{node_name}: inputs", model, OK, "all inputs fresh", in_values))

    # language
    kv_total = language.get("kv_bytes_total", 0) or 1
    kv_used = language.get("kv_bytes_in_use", 0)
    lang_values = {**language, "kv_usage_percent": 100.0 * kv_used / kv_total,
                   "tokens_per_s": loop["tokens_per_s"]}
    queued = language.get("queued_requests", 0)
    level = WARN if queued else OK
    msg = (f"{language.get('live_requests', 0)} live, {queued} queued, "
           f"KV {100.0 * kv_used / kv_total:.0f}% used, {loop['tokens_per_s']:.1f} tok/s")
    statuses.append(_status(f"{node_name}: language", model, level, msg, lang_values))

    # robot time
    if robot_time is not None:
        problems = robot_time["problems"]
        v = robot_time["values"]
        msg = "; ".join(problems) if problems else (
            f"chunks at {v['action_rate_hz']:g} Hz points, latency {v['chunk_latency_ms_last']:.0f} ms, "
            f"RTC {v['rtc_mode']}")
        statuses.append(_status(f"{node_name}: robot time", model, WARN if problems else OK, msg, v))

    arr = DiagnosticArray()
    arr.header.stamp = stamp
    arr.status = statuses
    return arr


class Diagnostics:
    """The diagnostics timer's callback: the figures of every robot the node serves on
    /diagnostics (a fleet robot's statuses named NODE/ROBOT: ...)."""

    def __init__(self, serving: Callable[[], Serving | None], node_name: str, clock, state: Callable[[], str]):
        """serving() -> what configure built (None once cleaned up: the timer may still fire);
        clock: the node's; state() -> its lifecycle state."""
        self._serving, self._name, self._clock, self._state = serving, node_name, clock, state

    def __call__(self) -> None:
        serving = self._serving()
        if serving is None:             # cleaned up while the timer fired
            return
        arr = None
        for rt in list(serving.robots.values()):
            one = self._robot(serving, rt)
            if arr is None:
                arr = one
            else:
                arr.status.extend(one.status)
        if arr is not None:
            serving.diag_pub.publish(arr)

    def _robot(self, serving: Serving, rt: Runtime) -> DiagnosticArray:
        language = {**rt.stats.engine_figures(), "kv_bytes_total": rt.engine.pool.bytes_total,
                    **rt.language.figures(), "clock_jumps": rt.monitor.clock_jumps}
        robot_time = rt.robot_time.diagnostics()
        if rt.robot_time.rtc.enabled:
            robot_time["values"].update(rtc_figures(rt.experts))   # each further expert's own RTC planner
        name = self._name + (f"/{rt.name}" if rt.name else "")
        return build(
            name, self._clock.now().to_msg(), self._state(),
            rt.p["model"], rt.stats.snapshot(),
            rt.monitor.snapshot(), rt.monitor.counts(), language, serving.period_s, robot_time)
