"""One robot's sensor inputs: the camera and joint-state subscriptions' callbacks bind to it
(each input's latest message, checked but not converted) and the frame loop reads it.

A camera sends more images than frames use, so pixels are converted once per frame, on the
control thread (frame_images); bad messages are counted and logged per input. Built by
configure, closed by cleanup: a callback still running then changes nothing.
"""
from __future__ import annotations

from sensor_msgs.msg import JointState

from .convert import InputError, joint_positions, rgb_to_image
from .input_monitor import InputMonitor
from .logs import LOG_THROTTLE_S
from .loop_stats import LoopStats


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
        (frame_images)."""
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

    def frame_images(self, snap) -> dict | None:
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
