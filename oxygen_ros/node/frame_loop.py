"""The control loop: one engine frame per tick on the inference thread, inputs to published chunk.

Its own thread keeps the executor free for sensors, questions and diagnostics while a frame
computes; a frame that overruns skips the ticks it overlapped, one that fails never ends the loop.
"""
from __future__ import annotations

import threading
import time
import traceback
from typing import TYPE_CHECKING

from ..engine.observation import ObservationError
from ..engine.policy_io import PolicyIOError
from ..engine.requests import LanguageRequest, RequestRejected
from . import params as node_params
from .frame_publisher import FramePublisher
from .logs import LOG_THROTTLE_S
from .tick_clock import TickClock

if TYPE_CHECKING:
    from .oxygen_node import OxygenNode, Runtime


class FrameLoop:
    """One activation's loop: `run` is the inference thread's target, until `stop` is set."""

    def __init__(self, node: OxygenNode, rt: Runtime, stop: threading.Event):
        self._node, self._rt, self._stop = node, rt, stop
        self._publish = FramePublisher(node, rt)

    def run(self) -> None:
        rt, log = self._rt, self._node.log_for
        # replanning "asap": no ticks, the next frame starts when the last one ends
        clock = TickClock(rt.period_s) if rt.robot_time.replanning == "rate" else None
        first = True                   # no frame has run in this activation yet
        while clock.wait(self._stop) if clock else not self._stop.is_set():
            start, ran = time.monotonic(), False
            try:
                ran = self.tick()
                if ran:
                    self._check_rate(time.monotonic() - start)
            except Exception as e:  # noqa: BLE001 - a failed frame never ends the loop
                if self._stop.is_set() or not self._node.context.ok():   # shutting down (Ctrl-C)
                    break
                rt.stats.no_chunk(f"frame failed: {type(e).__name__}: {e}", error=True)
                log("control_loop").error(
                    f"frame failed: {type(e).__name__}: {e}\n{traceback.format_exc()}",
                    throttle_duration_sec=LOG_THROTTLE_S)
            if not ran:
                rt.answers.no_frame()
            if clock is None:
                if not ran:
                    self._stop.wait(0.01)      # no frame ran (inputs not ready): do not spin
                continue
            if first and not ran and self._first_inputs(clock):
                continue                       # the first frame now; the ticks count from it
            first = first and not ran
            skipped = clock.advance()
            if skipped:
                rt.stats.skipped(skipped)
                log("deadline").warning(
                    f"frame overran the {rt.period_s * 1e3:.0f} ms period: skipped {skipped} tick(s) "
                    f"({rt.stats.skipped_ticks} so far)", throttle_duration_sec=LOG_THROTTLE_S)

    def _first_inputs(self, clock: TickClock) -> bool:
        """Before the first frame, poll the inputs until the next tick instead of sleeping:
        the subscriptions are new at each configure and their first messages come just after
        activation, which made the first chunk a whole period late (4 s at 0.25 Hz). True
        (and the ticks restarted from now) once they are usable; False at once when they
        were (the tick failed otherwise: the next one as usual)."""
        if self._rt.monitor.snapshot().usable:
            return False
        next_tick = clock.next_tick + clock.period_s
        while time.monotonic() < next_tick and not self._stop.wait(0.01):
            if self._rt.monitor.snapshot().usable:
                clock.restart()
                return True
        return False

    def _check_rate(self, frame_s: float) -> None:
        warning = self._rt.robot_time.frame_done(frame_s)
        if warning:
            self._node.log_for("rate").warning(warning)

    def tick(self) -> bool:
        """One frame; True when it ran (a chunk was computed), False when inputs stopped it."""
        node, rt, log = self._node, self._rt, self._node.log_for
        now = node.get_clock().now()
        tick_mono = time.monotonic()
        jump = rt.monitor.note_ros_time(now.nanoseconds)
        if jump < 0:
            log("clock").warning(
                f"ROS time jumped back by {-jump:.3f} s; observation ages use the monotonic clock",
                throttle_duration_sec=LOG_THROTTLE_S)
        elif jump > 0:
            log("clock").warning(
                f"ROS time jumped forward by {jump:.3f} s; the inputs received before it are that much older",
                throttle_duration_sec=LOG_THROTTLE_S)
        live = node_params.read(node, node_params.LIVE)   # live parameters apply from this frame
        rt.monitor.max_age_s = live["max_observation_age_s"]
        snap = rt.monitor.snapshot()
        if not snap.usable:
            reason = "; ".join(snap.problems) or "inputs not usable"
            rt.stats.no_chunk(reason)
            log("inputs").error(f"no action chunk: {reason}", throttle_duration_sec=LOG_THROTTLE_S)
            return False
        images = node.inputs.frame_images(rt, snap)
        if images is None:
            return False
        state = snap.values[rt.joint_input]
        try:
            obs = rt.policy.observation(images, state, live["instruction"], snap.stamp_ns / 1e9)
        except PolicyIOError as e:
            rt.stats.no_chunk(f"observation rejected by the policy I/O: {e}", error=True)
            log("observation").error(f"no action chunk: observation rejected by the policy I/O: {e}",
                                     throttle_duration_sec=LOG_THROTTLE_S)
            return False
        self._submit_requests(live)
        rt.answers.frame_started(rt.engine.backlog())     # what a question asked now would wait behind
        obs_stamp_ns = snap.stamp_ns or now.nanoseconds       # unstamped inputs: the tick's time
        guide, note = rt.robot_time.rtc_guide(obs_stamp_ns / 1e9, state)
        if note:
            log("rtc").info(note, throttle_duration_sec=LOG_THROTTLE_S)
        # each further expert continues its own previous chunk (notes: the first expert's say it)
        expert_guides = {e.name: e.rtc.guide(obs_stamp_ns / 1e9, state)[0] for e in rt.experts}
        try:
            chunk = rt.engine.act(obs, rtc=guide, expert_rtc=expert_guides)
        except (ObservationError, ValueError) as e:
            rt.stats.no_chunk(f"observation rejected by the model: {e}", error=True)
            log("observation").error(f"no action chunk: observation rejected by the model: {e}",
                                     throttle_duration_sec=LOG_THROTTLE_S)
            return False
        acted = time.perf_counter()
        try:
            sent = self._publish.chunk(chunk, state, now, tick_mono, obs_stamp_ns, live)
            # on the engine's frame clock (as total_ms): when the chunk was ready + publishing it
            sent["chunk_ms"] = chunk.timings_ms["chunk"] + (time.perf_counter() - acted) * 1e3
        finally:
            result = rt.engine.talk()      # language only after the chunk is out (and always:
        self._publish.frame(result, obs_stamp_ns, sent)   # it closes the engine's frame)
        return True

    def _submit_requests(self, live: dict) -> None:
        """Hand waiting questions, then due narration and memory requests, to the engine."""
        rt = self._rt
        engine = rt.engine
        cap = engine.config.max_new_tokens
        for q in rt.board.take():          # questions first: they have a caller waiting
            try:
                rt.board.submitted(q, engine.submit(LanguageRequest(q.prompt, "answer", q.max_new_tokens)))
            except RequestRejected as e:
                rt.board.fail(q, f"the engine rejected the question: {e}")
        for stream in ("narration", "memory"):
            every = live[f"{stream}_every_n_frames"]
            if not every or engine.frame_index % every:
                continue
            if rt.stream_live[stream] is not None:   # the previous one is still decoding
                rt.skipped_requests[stream] += 1
                continue
            req = LanguageRequest(live[f"{stream}_prompt"], stream, min(live[f"{stream}_max_tokens"], cap))
            try:
                rt.stream_live[stream] = engine.submit(req)
            except RequestRejected as e:
                rt.skipped_requests[stream] += 1
                self._node.log_for(stream).warning(f"{stream} request skipped: {e}",
                                                   throttle_duration_sec=LOG_THROTTLE_S)
