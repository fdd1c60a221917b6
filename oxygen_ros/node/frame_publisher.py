"""What one frame publishes: its action chunks as soon as they are ready, then timing and text.

The chunk leaves before any language work, stamped at its observation's time; finished
text requests then close their bookkeeping (the stream's slot, the memory log, answers).
A publisher or the policy I/O that raises is this robot's fault (`fault`): counted, logged
throttled, and the rest of the frame still goes out; a finished request's bookkeeping runs
even when its last delta could not be published, so its stream never stays wedged.
"""
from __future__ import annotations

import time
import traceback

from .chunk_plan import plan_chunk
from .convert import frame_timing_msg, merge_deltas, text_chunk_msg, trajectory_msg
from .expert_outputs import expert_positions
from .logs import LOG_THROTTLE_S
from .runtime import Runtime


class FramePublisher:
    def __init__(self, rt: Runtime, pubs: dict, clock, log, memory_log_size: int, decode_budget: int,
                 running=lambda: True):
        """rt: the robot's state; pubs: its publishers by output (trajectory, trajectory:EXPERT,
        timing, narration, memory, answer); clock: the node's; log(topic) -> the robot's logger;
        memory_log_size, decode_budget (steps_per_frame, 0: automatic): configure's settings;
        running() -> False once the node's context is shut down (Ctrl-C mid-frame)."""
        self._rt, self._pubs, self._clock, self._log = rt, pubs, clock, log
        self._memory_log_size, self._decode_budget = memory_log_size, decode_budget
        self._running = running

    def chunk(self, chunk, state, tick_now, tick_mono: float, obs_stamp_ns: int, live: dict) -> tuple[dict, bool]:
        """Publish the action chunk now, stamped at its observation's time; returns the
        figures FrameTiming carries, and whether a chunk carrying the observation's stamp
        went out (not when it was restamped or expired: new_observations_only may act on that
        observation again, as a lock-step sim waits for exactly that stamp)."""
        rt, log = self._rt, self._log
        actions = rt.policy.actions(chunk.actions, state)[: live["chunk_points"] or None]
        positions, clipped = rt.action_joints.clip(actions)
        if clipped:
            so_far = rt.stats.clipped(clipped)      # counted in the loop's figures (/diagnostics)
            log("envelope").warning(
                f"{clipped} of {len(positions)} chunk points clipped into the joint limits "
                f"({so_far} so far)", throttle_duration_sec=LOG_THROTTLE_S)
        rtime = rt.robot_time
        publish_now = self._clock.now()
        obs_s, restamped = rtime.observation_time(obs_stamp_ns / 1e9, tick_now.nanoseconds / 1e9,
                                                  publish_now.nanoseconds / 1e9, time.monotonic() - tick_mono)
        if restamped:       # the ROS clock jumped, or the stamp is not on the node's clock
            log("clock").warning(restamped, throttle_duration_sec=LOG_THROTTLE_S)
        planned = plan_chunk(positions, obs_s, rtime.action_dt, publish_now.nanoseconds / 1e9,
                             live["trajectory_velocities"])
        expired = rtime.chunk_sent(planned, positions, publish_now.nanoseconds / 1e9 - obs_s)
        if expired:
            log("latency").error(expired, throttle_duration_sec=LOG_THROTTLE_S)
        else:
            self._pubs["trajectory"].publish(trajectory_msg(rt.action_joints.names, planned,
                                                         None if restamped else obs_stamp_ns))
        for expert in rt.experts:       # the further experts' chunks, from the same observation
            positions, clipped = expert_positions(expert, chunk.expert_actions[expert.name])
            if clipped:
                rt.stats.clipped(clipped)
            now_s = self._clock.now().nanoseconds / 1e9
            own = plan_chunk(positions, obs_s, expert.action_dt, now_s, live["trajectory_velocities"])
            if not own.empty:
                self._pubs[f"trajectory:{expert.name}"].publish(
                    trajectory_msg(expert.joints.names, own, None if restamped else obs_stamp_ns))
                expert.rtc.published(own.stamp_s, positions, max(0.0, now_s - obs_s))
        return {"chunk_latency_ms": (publish_now.nanoseconds / 1e9 - obs_s) * 1e3,
                "points_dropped": planned.dropped, "rtc_delay_steps": rtime.rtc.last_delay}, \
            not (restamped or expired)

    def fault(self, what: str, e: Exception, chunk_lost: bool = False) -> None:
        """An exception in this robot's policy I/O or publishing: counted (`robot_faults` in
        /diagnostics; `chunk_lost`: its tick made no chunk), logged throttled; the caller
        goes on with the rest of the frame and the other robots. A publish that fails because
        the node is shutting down is no fault: nothing is counted or logged."""
        if not self._running():
            return
        rt = self._rt
        reason = f"{what} failed: {type(e).__name__}: {e}"
        rt.stats.fault(reason, chunk_lost)
        self._log("faults").error(
            f"{reason} ({rt.stats.robot_faults} fault(s) so far){'; no action chunk' if chunk_lost else ''}\n"
            f"{traceback.format_exc()}", throttle_duration_sec=LOG_THROTTLE_S)

    def frame(self, result, obs_stamp_ns: int, sent: dict) -> None:
        """FrameTiming, the frame's text deltas, and the loop's statistics."""
        rt = self._rt
        ms = result.timings_ms
        missed = ms["total"] > rt.period_s * 1e3
        timing = frame_timing_msg(result, obs_stamp_ns, rt.period_s, **sent)
        timing.header.stamp = self._clock.now().to_msg()
        try:
            self._pubs["timing"].publish(timing)
        except Exception as e:  # noqa: BLE001 - the text and statistics still go out
            self.fault("publishing FrameTiming", e)
        self.text(result, timing.header.stamp)
        budget = self._decode_budget
        rt.stats.frame(ms["total"], missed, result.tokens_emitted, decode_steps=result.decode_steps,
                       decode_budget=budget if budget else f"auto ({result.decode_steps})",
                       live_requests=result.live_requests, queued_requests=result.queued_requests,
                       kv_bytes_in_use=result.kv_bytes_in_use)

    def text(self, result, stamp=None) -> None:
        """The frame's text deltas (a fleet robot absent from the frame gets only these:
        its requests decode in every frame)."""
        stamp = stamp or self._clock.now().to_msg()
        for d in merge_deltas(result.deltas):
            pub = self._pubs.get(d.stream)
            try:
                if pub is not None:
                    pub.publish(text_chunk_msg(d, stamp))
            except Exception as e:  # noqa: BLE001 - the other deltas, and this one's bookkeeping, go on
                self.fault(f"publishing {d.stream}", e)
            if d.done:
                try:
                    self._finished(d)
                except Exception as e:  # noqa: BLE001
                    self.fault(f"finishing {d.stream} request {d.request_id}", e)

    def _finished(self, d) -> None:
        full = self._rt.language.finished(d)      # first: the stream may start its next request
        if d.error:
            self._log(d.stream).warning(f"{d.stream} request {d.request_id} failed: {d.error}",
                                        throttle_duration_sec=LOG_THROTTLE_S)
        if full:
            self._log("memory").info(
                f"memory log full: the latest {self._memory_log_size} entries are kept (memory_log_size), "
                "older ones are dropped", once=True)
