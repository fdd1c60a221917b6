"""sensor_msgs/Image and sensor_msgs/JointState <-> numpy, with numpy alone.

No cv_bridge: an image is viewed through its `step` (row stride, padding allowed),
channels reordered to RGB, 16-bit encodings byte-swapped per `is_bigendian` and
scaled to 8 bits. Joint states are matched to the configured joint names by name, in
any order. Every rejection raises `InputError` with a message that names the problem.
"""
from __future__ import annotations

import numpy as np

# encoding -> (channels, bytes per channel, channel order that gives RGB; None = mono)
ENCODINGS = {
    "rgb8": (3, 1, (0, 1, 2)),
    "bgr8": (3, 1, (2, 1, 0)),
    "rgba8": (4, 1, (0, 1, 2)),
    "bgra8": (4, 1, (2, 1, 0)),
    "mono8": (1, 1, None),
    "rgb16": (3, 2, (0, 1, 2)),
    "bgr16": (3, 2, (2, 1, 0)),
    "rgba16": (4, 2, (0, 1, 2)),
    "bgra16": (4, 2, (2, 1, 0)),
    "mono16": (1, 2, None),
}


class InputError(ValueError):
    """A sensor message the node cannot use; the message says why."""


def image_to_rgb(msg) -> np.ndarray:
    """sensor_msgs/Image -> HxWx3 uint8 RGB (a fresh array; the message buffer may be reused)."""
    enc = msg.encoding.lower()
    if enc not in ENCODINGS:
        raise InputError(f"unsupported image encoding {msg.encoding!r}; supported: {', '.join(ENCODINGS)}")
    channels, depth, order = ENCODINGS[enc]
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    if h == 0 or w == 0:
        raise InputError(f"empty image ({w}x{h})")
    row = w * channels * depth
    if step < row:
        raise InputError(f"image step {step} is smaller than width*channels*bytes = {row} ({enc}, {w}x{h})")
    size = len(msg.data)
    if size != step * h:
        raise InputError(f"image data has {size} bytes, expected step*height = {step}*{h} = {step * h}")
    rows = np.frombuffer(msg.data, dtype=np.uint8, count=step * h).reshape(h, step)[:, :row]
    if depth == 1:
        pixels = rows.reshape(h, w, channels)
    else:
        dtype = np.dtype(">u2" if msg.is_bigendian else "<u2")
        pixels = (np.ascontiguousarray(rows).view(dtype).reshape(h, w, channels) >> 8).astype(np.uint8)
    if order is None:
        return np.repeat(pixels, 3, axis=2)
    return np.ascontiguousarray(pixels[:, :, list(order)])


def rgb_to_image(rgb: np.ndarray, encoding: str = "rgb8", msg=None, padding: int = 0):
    """HxWx3 uint8 RGB -> sensor_msgs/Image in `encoding` (8-bit encodings), rows padded
    by `padding` bytes. The inverse of `image_to_rgb`; used by test drivers and simulators."""
    from sensor_msgs.msg import Image

    enc = encoding.lower()
    if enc not in ENCODINGS or ENCODINGS[enc][1] != 1:
        raise InputError(f"rgb_to_image writes 8-bit encodings only, got {encoding!r}")
    rgb = np.asarray(rgb, dtype=np.uint8)
    channels, _, order = ENCODINGS[enc]
    if order is None:
        pixels = rgb.mean(axis=2, keepdims=True).round().astype(np.uint8)
    else:
        pixels = np.empty(rgb.shape[:2] + (channels,), np.uint8)
        pixels[:, :, list(order)] = rgb
        if channels == 4:
            pixels[:, :, 3] = 255
    h, w = rgb.shape[:2]
    step = w * channels + padding
    buf = np.zeros((h, step), np.uint8)
    buf[:, : w * channels] = pixels.reshape(h, -1)
    msg = msg or Image()
    msg.height, msg.width, msg.encoding, msg.step = h, w, enc, step
    msg.is_bigendian = 0
    msg.data = buf.tobytes()
    return msg


def joint_positions(msg, names: list[str]) -> np.ndarray:
    """sensor_msgs/JointState -> positions of `names`, in that order (float64).

    Joints are matched by name; extra joints in the message are ignored. Missing joints,
    a name/position length mismatch, duplicate names and NaN/inf positions are errors.
    """
    got = list(msg.name)
    pos = np.asarray(msg.position, dtype=np.float64)
    if len(got) != len(pos):
        raise InputError(f"joint state has {len(got)} names but {len(pos)} positions")
    index = {}
    for i, n in enumerate(got):
        if n in index:
            raise InputError(f"joint state names joint {n!r} twice")
        index[n] = i
    missing = [n for n in names if n not in index]
    if missing:
        raise InputError(f"joint state is missing joint(s) {missing} (has {got})")
    out = pos[[index[n] for n in names]]
    bad = [n for n, v in zip(names, out) if not np.isfinite(v)]
    if bad:
        raise InputError(f"joint state has non-finite position(s) for {bad}")
    return out
