"""The sensor subscriptions' callbacks: each input's latest message, checked but not converted.

A camera sends more images than frames use, so pixels are converted once per frame, on the
control thread (frame_images); bad messages are counted and logged per input.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sensor_msgs.msg import JointState

from .convert import InputError, joint_positions, rgb_to_image
from .logs import LOG_THROTTLE_S

if TYPE_CHECKING:
    from .oxygen_node import OxygenNode, Runtime


class SensorInputs:
    def __init__(self, node: OxygenNode):
        self._node = node

    def _arrival(self, stamp) -> tuple[int, float]:
        """(header stamp ns, transport latency s) measured now on the node's clock."""
        stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
        if stamp_ns == 0:
            return 0, 0.0
        return stamp_ns, (self._node.get_clock().now().nanoseconds - stamp_ns) / 1e9

    def on_image(self, robot: str, name: str, msg) -> None:
        """Keep the latest message of a robot's camera (checked, not converted): a camera
        sends more images than frames use, so pixels are converted or decoded once per
        frame (frame_images)."""
        rt = self._node.runtime_of(robot)    # None once cleaned up: a callback may still be running
        if rt is None:
            return
        try:
            rt.cameras[name].check(msg)
        except InputError as e:
            self._reject_image(rt, name, e)
            return
        rt.monitor.accept(name, msg, *self._arrival(msg.header.stamp))

    def _reject_image(self, rt: Runtime, name: str, e: InputError, accepted=None) -> None:
        """Count and log a rejection; `accepted`: the message was accepted before and is
        found bad now (it no longer counts as the camera's latest)."""
        if accepted is None:
            rt.monitor.reject(name, str(e))
        else:
            rt.monitor.discard(name, accepted, str(e))
        self._node.log_for(name).warning(f"{name}: image rejected: {e}", throttle_duration_sec=LOG_THROTTLE_S)

    def frame_images(self, rt: Runtime, snap) -> dict | None:
        """The frame's camera messages as RGB arrays by model slot (decoded, transformed);
        None if one fails: that message is discarded, so the next frame uses the one before
        it (while fresh) or the next to arrive."""
        images = {}
        for name, cam in rt.cameras.items():
            msg = snap.values[name]
            try:
                images[cam.slot] = cam.rgb(msg)
            except InputError as e:
                self._reject_image(rt, name, e, accepted=msg)
                rt.stats.no_chunk(f"{name}: image rejected: {e}")
                return None
        for slot, rgb in images.items():
            pub = rt.pubs.get(f"view:{slot}")
            if pub is not None:
                pub.publish(rgb_to_image(rgb))
        return images

    def on_joint_state(self, robot: str, msg: JointState) -> None:
        rt = self._node.runtime_of(robot)
        if rt is None:
            return
        name = rt.joint_input
        try:
            state = joint_positions(msg, list(rt.joints.names))
        except InputError as e:
            rt.monitor.reject(name, str(e))
            self._node.log_for(name).warning(f"{name}: joint state rejected: {e}",
                                             throttle_duration_sec=LOG_THROTTLE_S)
            return
        rt.monitor.accept(name, state, *self._arrival(msg.header.stamp))
