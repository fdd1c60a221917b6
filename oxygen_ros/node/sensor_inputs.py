"""One robot's sensor inputs: the camera and joint-state subscriptions' callbacks bind to it
(each input's latest message, checked but not converted) and the frame loop reads it through
one door, frame_inputs (the monitor's snapshot at the tick, and its images converted).

A camera sends more images than frames use, so pixels are converted once per frame, on the
control thread (frame_inputs); bad messages are counted and logged per input. Built by
configure, closed by cleanup: a callback still running then changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from sensor_msgs.msg import JointState

from .convert import InputError, joint_positions, rgb_to_image
from .input_monitor import InputMonitor
from .logs import LOG_THROTTLE_S
from .loop_stats import LoopStats


@dataclass(frozen=True)
class FrameInputs:
    """What a tick's frame gets from a robot's inputs."""
    jump_s: float              # how far ROS time jumped since the last tick (negative: back; 0.0: it did not)
    images: dict | None        # model slot -> RGB array; None: no frame for this robot at this tick
    state: object = None       # joint positions
    stamp_ns: int = 0          # the oldest header stamp among the inputs (0: unstamped)
    unusable: str = ""         # why the inputs cannot make a frame (stale, missing, rejected), to log


class SensorInputs:
    def __init__(self, cameras: dict, joint_input: str, joint_names: list, monitor: InputMonitor,
                 stats: LoopStats, clock, log_for, views: dict):
        """cameras: input name -> Camera; monitor: where accepted messages go; stats: the
        robot's loop figures (a rejected image costs its frame); clock: the node's (arrival
        latency); log_for(input) -> its logger; views: camera slot -> Image publisher of the
        converted view (publish_camera_views)."""
        self.cameras, self.joint_input, self._joint_names = cameras, joint_input, list(joint_names)
        self._monitor, self._stats, self._clock, self._log_for = monitor, stats, clock, log_for
        self._views = views
        self._closed = False

    def close(self) -> None:
        """Cleanup: a callback that still runs afterwards (its subscription just destroyed) is ignored."""
        self._closed = True

    def _arrival(self, stamp) -> tuple[int, float]:
        """(header stamp ns, transport latency s) measured now on the node's clock."""
        stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
        if stamp_ns == 0:
            return 0, 0.0
        return stamp_ns, (self._clock.now().nanoseconds - stamp_ns) / 1e9

    def on_image(self, name: str, msg) -> None:
        """Keep the latest message of a camera (checked, not converted): a camera sends more
        images than frames use, so pixels are converted or decoded once per frame
        (frame_inputs)."""
        if self._closed:
            return
        try:
            self.cameras[name].check(msg)
        except InputError as e:
            self._reject_image(name, e)
            return
        self._monitor.accept(name, msg, *self._arrival(msg.header.stamp))

    def _reject_image(self, name: str, e: InputError, accepted=None) -> None:
        """Count and log a rejection; `accepted`: the message was accepted before and is
        found bad now (it no longer counts as the camera's latest)."""
        if accepted is None:
            self._monitor.reject(name, str(e))
        else:
            self._monitor.discard(name, accepted, str(e))
        self._log_for(name).warning(f"{name}: image rejected: {e}", throttle_duration_sec=LOG_THROTTLE_S)

    def usable(self) -> bool:
        """Whether every input is present and fresh now (before the first frame)."""
        return self._monitor.snapshot().usable

    def frame_inputs(self, now_ns: int, max_age_s: float, last_stamp_ns: int | None = None) -> FrameInputs:
        """The inputs of a tick at ROS time `now_ns`, no older than `max_age_s` (live: it applies
        from this tick); images None, the reason counted in the loop's figures, when they cannot
        make a frame: not usable, the observation of `last_stamp_ns` again (new_observations_only),
        or an image that fails to convert."""
        jump = self._monitor.note_ros_time(now_ns)     # before the new limit: the jump is judged as before
        self._monitor.max_age_s = max_age_s
        snap = self._monitor.snapshot()
        if not snap.usable:
            reason = snap.unusable
            self._stats.no_chunk(reason)
            return FrameInputs(jump, None, unusable=reason)
        if last_stamp_ns is not None and snap.stamp_ns and snap.stamp_ns == last_stamp_ns:
            self._stats.no_chunk("no new observation since the last chunk (new_observations_only)", waiting=True)
            return FrameInputs(jump, None)
        return FrameInputs(jump, self._images(snap), snap.values[self.joint_input], snap.stamp_ns)

    def _images(self, snap) -> dict | None:
        """The frame's camera messages as RGB arrays by model slot (decoded, transformed);
        None if one fails: that message is discarded, so the next frame uses the one before
        it (while fresh) or the next to arrive."""
        images = {}
        for name, cam in self.cameras.items():
            msg = snap.values[name]
            try:
                images[cam.slot] = cam.rgb(msg)
            except InputError as e:
                self._reject_image(name, e, accepted=msg)
                self._stats.no_chunk(f"{name}: image rejected: {e}")
                return None
        for slot, rgb in images.items():
            pub = self._views.get(slot)
            if pub is not None:
                pub.publish(rgb_to_image(rgb))
        return images

    def on_joint_state(self, msg: JointState) -> None:
        if self._closed:
            return
        name = self.joint_input
        try:
            state = joint_positions(msg, self._joint_names)
        except InputError as e:
            self._monitor.reject(name, str(e))
            self._log_for(name).warning(f"{name}: joint state rejected: {e}", throttle_duration_sec=LOG_THROTTLE_S)
            return
        self._monitor.accept(name, state, *self._arrival(msg.header.stamp))
