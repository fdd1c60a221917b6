"""The control loop: one engine frame per tick on the inference thread, inputs to published chunks.

Its own thread keeps the executor free for sensors, questions and diagnostics while a frame
computes; a frame that overruns skips the ticks it overlapped, one that fails never ends the loop.
A node serving a fleet runs the same loop: each robot whose inputs are usable is in the
tick's frame (one batched prefill and action sampling), each robot's chunk goes out as soon
as the batch has it, then one decode batch serves every robot's text. A robot whose inputs
are not usable is left out and diagnosed; it never holds the others back. An exception in
one robot's policy I/O or publishing stays with that robot (FramePublisher.fault): the
others still get their chunk, and every robot's text of the frame goes out.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass

from ..engine.policy_io import PolicyIOError
from . import params as node_params
from .frame_publisher import FramePublisher
from .logs import LOG_THROTTLE_S
from .runtime import NodeDoors, Runtime, Serving
from .tick_clock import TickClock


@dataclass
class RobotFrame:
    """One robot's inputs to a tick's frame."""
    obs: object                 # the engine's Observation
    state: object               # joint positions the observation was built from
    obs_stamp_ns: int
    live: dict                  # the live parameters read for this frame
    guide: object               # RTC guide of the first expert (or None)
    expert_guides: dict


class FrameLoop:
    """One activation's loop: `run` is the inference thread's target, until `stop` is set."""

    def __init__(self, serving: Serving, stop: threading.Event, doors: NodeDoors):
        self._serving, self._stop, self._doors = serving, stop, doors
        self._robots = serving.robots
        self._acted_stamp: dict[str, int] = {}     # robot -> the stamp its last chunk came from
        self._publish = {name: FramePublisher(rt, rt.pubs, doors.clock, lambda topic, r=name: doors.log_for(topic, r),
                                              rt.p["memory_log_size"], rt.engine.config.steps_per_frame,
                                              running=doors.running)
                         for name, rt in self._robots.items()}

    def _log(self, rt: Runtime, topic: str):
        return self._doors.log_for(topic, rt.name)

    def run(self) -> None:
        serving, log = self._serving, self._doors.log_for
        robots = list(self._robots.values())
        if not self._await_recorders():
            return
        # replanning "asap": no ticks, the next frame starts when the last one ends
        clock = TickClock(serving.period_s) if robots[0].robot_time.replanning == "rate" else None
        first = True                   # no frame has run in this activation yet
        while clock.wait(self._stop) if clock else not self._stop.is_set():
            start, ran = time.monotonic(), set()
            try:
                ran = self.tick()
                if ran:
                    self._check_rate(ran, time.monotonic() - start)
            except Exception as e:  # noqa: BLE001 - a failed frame never ends the loop
                if self._stop.is_set() or not self._doors.running():     # shutting down (Ctrl-C)
                    break
                for rt in robots:
                    rt.stats.no_chunk(f"frame failed: {type(e).__name__}: {e}", error=True)
                log("control_loop").error(
                    f"frame failed: {type(e).__name__}: {e}\n{traceback.format_exc()}",
                    throttle_duration_sec=LOG_THROTTLE_S)
            for rt in robots:
                if rt.name not in ran:
                    rt.language.no_frame()
            if clock is None:
                if not ran:
                    self._stop.wait(0.01)      # no frame ran (inputs not ready): do not spin
                continue
            if first and not ran and self._first_inputs(clock):
                continue                       # the first frame now; the ticks count from it
            first = first and not ran
            skipped = clock.advance()
            if skipped:
                for rt in robots:
                    rt.stats.skipped(skipped)
                log("deadline").warning(
                    f"frame overran the {serving.period_s * 1e3:.0f} ms period: skipped {skipped} tick(s) "
                    f"({robots[0].stats.skipped_ticks} so far)", throttle_duration_sec=LOG_THROTTLE_S)

    def _await_recorders(self) -> bool:
        """Hold the activation's first frame until the `await_recorders` of every robot
        subscribe to its outputs (recorder_wait.py says why the recorder's own view is not
        enough); meanwhile each waiting robot is diagnosed once a period. False if stopped."""
        missing = self._doors.missing_recorders(self._robots.values())
        if not missing:
            return True
        log = self._doors.log_for("recorders")
        gaps = [g for robot_gaps in missing.values() for g in robot_gaps]
        log.info(f"first frame waits for {gaps[0]}" + (f" and {len(gaps) - 1} more" if len(gaps) > 1 else ""))
        start = time.monotonic()
        last = start - self._serving.period_s
        while missing:
            now = time.monotonic()
            if now - last >= self._serving.period_s:
                last = now
                for name, gaps in missing.items():
                    self._robots[name].stats.no_chunk(f"waiting for {gaps[0]} (await_recorders)")
            if self._stop.wait(0.05):
                return False
            missing = self._doors.missing_recorders(self._robots.values())
        log.info(f"awaited recorders subscribed after {time.monotonic() - start:.2f} s: first frame")
        return True

    def _usable(self) -> bool:
        return any(rt.inputs.usable() for rt in self._robots.values())

    def _first_inputs(self, clock: TickClock) -> bool:
        """Before the first frame, poll the inputs until the next tick instead of sleeping:
        the subscriptions are new at each configure and their first messages come just after
        activation, which made the first chunk a whole period late (docs/node.md). True
        (and the ticks restarted from now) once they are usable; False at once when they
        were (the tick failed otherwise: the next one as usual)."""
        if self._usable():
            return False
        next_tick = clock.next_tick + clock.period_s
        while time.monotonic() < next_tick and not self._stop.wait(0.01):
            if self._usable():
                clock.restart()
                return True
        return False

    def _check_rate(self, ran: set, frame_s: float) -> None:
        for name in ran:
            rt = self._robots[name]
            warning = rt.robot_time.frame_done(frame_s)
            if warning:
                self._log(rt, "rate").warning(warning)

    def tick(self) -> set:
        """One frame; the robots it computed a chunk for (empty when inputs stopped them all)."""
        serving = self._serving
        now = self._doors.clock.now()
        tick_mono = time.monotonic()
        frames = {}
        for name, rt in self._robots.items():
            try:
                frame = self._prepare(rt, now)
            except Exception as e:  # noqa: BLE001 - this robot is left out, the others go on
                self._publish[name].fault("preparing the observation", e, chunk_lost=True)
                continue
            if frame is not None:
                frames[name] = frame
        if not frames:
            return set()
        chunks = serving.frames.act({n: f.obs for n, f in frames.items()},
                                    rtc={n: f.guide for n, f in frames.items()},
                                    expert_rtc={n: f.expert_guides for n, f in frames.items()})
        acted = time.perf_counter()
        for name, why in serving.frames.faults.items():
            rt = self._robots[name]
            rt.stats.no_chunk(f"observation rejected by the model: {why}", error=True)
            self._log(rt, "observation").error(f"no action chunk: observation rejected by the model: {why}",
                                               throttle_duration_sec=LOG_THROTTLE_S)
        sent = {}
        try:
            for name, chunk in chunks.items():
                f = frames[name]
                try:
                    sent[name], on_stamp = self._publish[name].chunk(chunk, f.state, now, tick_mono,
                                                                     f.obs_stamp_ns, f.live)
                except Exception as e:  # noqa: BLE001 - this robot's chunk is lost, the next robots' are not
                    self._publish[name].fault("the action chunk", e, chunk_lost=True)
                    continue
                if on_stamp:
                    self._acted_stamp[name] = f.obs_stamp_ns
                # on the engine's frame clock (as total_ms): when the chunk was ready + publishing it
                sent[name]["chunk_ms"] = chunk.timings_ms["chunk"] + (time.perf_counter() - acted) * 1e3
        finally:
            results = serving.frames.talk()   # language only after the chunks are out (and always:
        for name, result in results.items():  # it closes the engine's frame)
            try:
                if name in sent:
                    self._publish[name].frame(result, frames[name].obs_stamp_ns, sent[name])
                else:                        # not in this frame, or its chunk failed: its requests decoded
                    self._publish[name].text(result)
            except Exception as e:  # noqa: BLE001 - the other robots' text still goes out
                self._publish[name].fault("publishing the frame's text", e)
        return set(sent)

    def _prepare(self, rt: Runtime, now) -> RobotFrame | None:
        """A robot's observation for this frame, its requests handed to the engine; None
        (and the reason counted and logged) when its inputs cannot make one."""
        live = self._doors.read(node_params.LIVE, rt.name)   # live parameters apply from this frame
        got = rt.inputs.frame_inputs(now.nanoseconds, live["max_observation_age_s"],
                                     self._acted_stamp.get(rt.name) if live["new_observations_only"] else None)
        if got.jump_s < 0:
            self._log(rt, "clock").warning(
                f"ROS time jumped back by {-got.jump_s:.3f} s; observation ages use the monotonic clock",
                throttle_duration_sec=LOG_THROTTLE_S)
        elif got.jump_s > 0:
            self._log(rt, "clock").warning(
                f"ROS time jumped forward by {got.jump_s:.3f} s; the inputs received before it are that much older",
                throttle_duration_sec=LOG_THROTTLE_S)
        if got.unusable:
            self._log(rt, "inputs").error(f"no action chunk: {got.unusable}", throttle_duration_sec=LOG_THROTTLE_S)
        if got.images is None:
            return None
        state = got.state
        try:
            obs = rt.policy.observation(got.images, state, live["instruction"], got.stamp_ns / 1e9)
        except PolicyIOError as e:
            rt.stats.no_chunk(f"observation rejected by the policy I/O: {e}", error=True)
            self._log(rt, "observation").error(f"no action chunk: observation rejected by the policy I/O: {e}",
                                               throttle_duration_sec=LOG_THROTTLE_S)
            return None
        for stream, e in rt.language.begin_frame(live):    # questions, due streams, the estimate
            self._log(rt, stream).warning(f"{stream} request skipped: {e}", throttle_duration_sec=LOG_THROTTLE_S)
        obs_stamp_ns = got.stamp_ns or now.nanoseconds        # unstamped inputs: the tick's time
        guide, note = rt.robot_time.rtc_guide(obs_stamp_ns / 1e9, state)
        if note:
            self._log(rt, "rtc").info(note, throttle_duration_sec=LOG_THROTTLE_S)
        # each further expert continues its own previous chunk (notes: the first expert's say it)
        expert_guides = {e.name: e.rtc.guide(obs_stamp_ns / 1e9, state)[0] for e in rt.experts}
        return RobotFrame(obs, state, obs_stamp_ns, live, guide, expert_guides)
