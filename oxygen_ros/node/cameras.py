"""The node's cameras: the message type of each topic, its view transform, its size, and
decoding once per message.

A camera topic carries sensor_msgs/Image ("raw") or sensor_msgs/CompressedImage
("compressed", JPEG or PNG): set per camera by `camera_transports`, or "auto", which
follows image_transport's convention (a topic ending in /compressed is compressed).
Arriving messages are only checked (headers, constant time); the control frame converts
or decodes the one message it uses and applies the view (engine/observation/camera_view.py). A
camera's size is fixed by its first accepted image: a later image of another size is
rejected (the model's view and the crop box were set for the first one).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine.observation.camera_view import CameraView
from .convert import InputError, check_compressed, check_image, compressed_to_rgb, image_to_rgb

TRANSPORTS = ("auto", "raw", "compressed")


def transport_of(topic: str, transport: str = "auto") -> str:
    """"raw" or "compressed" for a camera topic."""
    if transport not in TRANSPORTS:
        raise ValueError(f"camera transport {transport!r} is not one of {list(TRANSPORTS)}")
    if transport != "auto":
        return transport
    return "compressed" if topic.rstrip("/").endswith("/compressed") else "raw"


def compressed_topic(topic: str) -> str:
    """image_transport's name for the compressed form of a raw image topic."""
    return topic if transport_of(topic) == "compressed" else topic.rstrip("/") + "/compressed"


def per_camera(p: dict, n: int) -> list[tuple[str, CameraView]]:
    """(transport setting, view) for each of the first `n` cameras from the node's
    parameters; shorter lists leave the remaining cameras at the defaults. ValueError names
    the bad entry."""
    lists = {k: p.get(k, []) for k in ("camera_transports", "camera_rotations", "camera_flips")}
    for key, values in lists.items():
        if len(values) > n:
            raise ValueError(f"{key} has {len(values)} entries for {n} camera_topics")
    crops = list(p.get("camera_crops", []))
    if len(crops) % 4 or len(crops) > 4 * n:
        raise ValueError(f"camera_crops needs 4 numbers (x, y, width, height) per camera, "
                         f"at most {4 * n}; got {len(crops)}")
    out = []
    for i in range(n):
        def get(key, default):
            values = lists[key]
            return values[i] if i < len(values) else default
        box = tuple(int(v) for v in crops[4 * i:4 * i + 4]) or (0, 0, 0, 0)
        try:
            view = CameraView(rotate=int(get("camera_rotations", 0)), flip=get("camera_flips", "none"),
                              crop=None if box == (0, 0, 0, 0) else box)
        except ValueError as e:
            raise ValueError(f"camera {i}: {e}") from None
        out.append((get("camera_transports", "auto"), view))
    return out


@dataclass
class Camera:
    name: str                  # resolved topic
    slot: str                  # the model's camera slot
    transport: str             # "raw" | "compressed"
    view: CameraView = field(default_factory=CameraView)
    size: tuple | None = None  # (height, width) of the first accepted image
    _last: tuple = (None, None)   # (message, transformed RGB) most recently decoded

    @property
    def message_type(self):
        from sensor_msgs.msg import CompressedImage, Image

        return CompressedImage if self.transport == "compressed" else Image

    def check(self, msg) -> None:
        """For every arriving message: header checks, the size lock and the crop box (InputError)."""
        if self.transport == "compressed":
            _, h, w = check_compressed(msg)
        else:
            _, h, w, _ = check_image(msg)
        if self.size is None:
            problem = self.view.problem(h, w)
            if problem:
                raise InputError(problem)
            self.size = (h, w)
        elif (h, w) != self.size:
            raise InputError(f"image size changed mid-run from {self.size[1]}x{self.size[0]} to {w}x{h}; "
                             "cleanup and configure the node to accept a new size")

    def rgb(self, msg) -> np.ndarray:
        """The message's pixels, transformed, as HxWx3 uint8 RGB; decoded once per message."""
        if self._last[0] is msg:
            return self._last[1]
        rgb = compressed_to_rgb(msg) if self.transport == "compressed" else image_to_rgb(msg)
        out = self.view.apply(rgb)
        self._last = (msg, out)
        return out
