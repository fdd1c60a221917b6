"""Every ROS message <-> engine value conversion of the node, both directions.

In: sensor_msgs/Image, sensor_msgs/CompressedImage and sensor_msgs/JointState -> numpy. Out: action chunks ->
trajectory_msgs/JointTrajectory, frame results -> oxygen_msgs/FrameTiming, text deltas ->
oxygen_msgs/TextChunk. Message classes are imported inside the functions, so the inputs'
numpy helpers load without the message packages.

Images without cv_bridge: an image is viewed through its `step` (row stride, padding allowed),
channels reordered to RGB, 16-bit encodings byte-swapped per `is_bigendian` and
scaled to 8 bits. Compressed images (JPEG, PNG) are checked from their headers on
arrival and decoded per control frame (see `decoder`). Joint states are matched to the configured joint names by name, in
any order. Every rejection raises `InputError` with a message that names the problem.
"""
from __future__ import annotations

import io
import re
import struct
from functools import lru_cache

import numpy as np

from ..engine.requests import TextDelta

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


# A camera image larger than this on a side is refused from its header, before any pixel is
# decoded or copied: a small JPEG or PNG may declare an enormous size (a decompression bomb).
MAX_IMAGE_SIDE = 8192


def _check_size(h: int, w: int) -> None:
    if h == 0 or w == 0:
        raise InputError(f"empty image ({w}x{h})")
    if h > MAX_IMAGE_SIDE or w > MAX_IMAGE_SIDE:
        raise InputError(f"image declares {w}x{h}, more than {MAX_IMAGE_SIDE} pixels a side: refused "
                         "without decoding it")


def check_image(msg) -> tuple[str, int, int, int]:
    """Validate a sensor_msgs/Image without touching its pixels (constant time: cheap
    enough for every message a camera sends); (encoding, height, width, step)."""
    enc = msg.encoding.lower()
    if enc not in ENCODINGS:
        raise InputError(f"unsupported image encoding {msg.encoding!r}; supported: {', '.join(ENCODINGS)}")
    channels, depth, _ = ENCODINGS[enc]
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    _check_size(h, w)
    row = w * channels * depth
    if step < row:
        raise InputError(f"image step {step} is smaller than width*channels*bytes = {row} ({enc}, {w}x{h})")
    size = len(msg.data)
    if size != step * h:
        raise InputError(f"image data has {size} bytes, expected step*height = {step}*{h} = {step * h}")
    return enc, h, w, step


def image_to_rgb(msg) -> np.ndarray:
    """sensor_msgs/Image -> HxWx3 uint8 RGB (a fresh array; the message buffer may be reused).

    The node calls it once per control frame for the frame's images, not per message."""
    enc, h, w, step = check_image(msg)
    channels, depth, order = ENCODINGS[enc]
    row = w * channels * depth
    rows = np.frombuffer(msg.data, dtype=np.uint8, count=step * h).reshape(h, step)[:, :row]
    if depth == 1:
        pixels = rows.reshape(h, w, channels)
    else:
        dtype = np.dtype(">u2" if msg.is_bigendian else "<u2")
        pixels = (np.ascontiguousarray(rows).view(dtype).reshape(h, w, channels) >> 8).astype(np.uint8)
    if order is None:
        return np.repeat(pixels, 3, axis=2)
    if channels == 3 and order == (0, 1, 2):
        return pixels.copy()                      # rgb8: one memcpy-like copy
    rgb = np.empty((h, w, 3), np.uint8)           # per-channel copies: ~10x faster than fancy indexing
    for i, c in enumerate(order):
        rgb[:, :, i] = pixels[:, :, c]
    return rgb


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


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_COLOR_TYPES = {0: "gray", 2: "RGB", 3: "palette", 4: "gray with alpha", 6: "RGBA"}


def compressed_format(fmt: str) -> str:
    """sensor_msgs/CompressedImage.format -> "jpeg" | "png". Accepts the plain names and
    image_transport's "<encoding>; jpeg compressed <encoding>" form."""
    words = set(re.split(r"[\s;:,]+", fmt.strip().lower()))
    if "compresseddepth" in words:
        raise InputError(f"compressed depth images are not camera images (format {fmt!r})")
    if words & {"jpeg", "jpg"}:
        return "jpeg"
    if "png" in words:
        return "png"
    raise InputError(f"unknown compressed image format {fmt!r}; supported: jpeg, png "
                     "(or image_transport's '<encoding>; jpeg compressed <encoding>')")


def _jpeg_size(data) -> tuple[int, int]:
    try:
        import simplejpeg
    except ImportError:                   # Pillow reads the header only until .load()
        from PIL import Image as PILImage
        w, h = PILImage.open(io.BytesIO(data)).size
        return h, w
    h, w, _, _ = simplejpeg.decode_jpeg_header(data)
    return h, w


def check_compressed(msg) -> tuple[str, int, int]:
    """Validate a sensor_msgs/CompressedImage from its header bytes only (microseconds, for
    every message); (format, height, width). PNG with alpha or 16 bits is refused here."""
    fmt = compressed_format(msg.format)
    data = msg.data
    if len(data) == 0:
        raise InputError(f"empty compressed image (format {msg.format!r})")
    head = bytes(data[:32])
    if fmt == "jpeg":
        if head[:2] != b"\xff\xd8":
            raise InputError(f"format {msg.format!r} but the data is not JPEG (starts {head[:4].hex()})")
        try:
            h, w = _jpeg_size(data)
        except Exception as e:  # noqa: BLE001 - any decoder error means a corrupt header
            raise InputError(f"corrupt JPEG header: {e}") from None
    else:
        if head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR" or len(head) < 26:
            raise InputError(f"format {msg.format!r} but the data is not PNG (starts {head[:8].hex()})")
        w, h = struct.unpack(">II", head[16:24])
        depth, color = head[24], head[25]
        if color in (4, 6):
            raise InputError(f"PNG has an alpha channel ({PNG_COLOR_TYPES[color]}); publish RGB or gray PNG")
        if depth == 16:
            raise InputError("PNG has 16 bits per channel; publish 8-bit RGB or gray PNG")
    _check_size(h, w)
    return fmt, h, w


def _pil_rgb(data, what: str) -> np.ndarray:
    from PIL import Image as PILImage

    try:
        im = PILImage.open(io.BytesIO(data))
        im.load()
    except Exception as e:  # noqa: BLE001 - Pillow raises OSError, SyntaxError, ValueError ...
        raise InputError(f"corrupt {what} data: {e}") from None
    if im.mode in ("RGBA", "LA", "PA") or im.mode.startswith("I"):
        raise InputError(f"{what} decodes to mode {im.mode} (alpha or 16 bits); publish RGB or gray")
    if im.mode == "L":
        return np.repeat(np.asarray(im)[:, :, None], 3, axis=2)
    return np.array(im if im.mode == "RGB" else im.convert("RGB"))


def _pypi_decoder():
    """simplejpeg (libjpeg-turbo, strict: truncated data is an error) for JPEG, Pillow for PNG."""
    try:
        import simplejpeg
    except ImportError:
        simplejpeg = None

    def decode(fmt: str, data) -> np.ndarray:
        if fmt == "jpeg" and simplejpeg is not None:
            try:
                return simplejpeg.decode_jpeg(data, colorspace="RGB")
            except ValueError as e:
                raise InputError(f"corrupt JPEG data: {e}") from None
        return _pil_rgb(data, fmt.upper())

    return ("simplejpeg (JPEG) + Pillow (PNG)" if simplejpeg else "Pillow (JPEG, PNG)"), decode


def _cv_bridge_decoder():
    """ROS 2's cv_bridge (OpenCV imdecode), if it imports and decodes a PNG exactly; None if not
    (PyPI's `cv-bridge` is the ROS 1 port and may fail here)."""
    try:
        from cv_bridge import CvBridge
        from sensor_msgs.msg import CompressedImage
        bridge = CvBridge()
        probe = (np.arange(2 * 3 * 3, dtype=np.uint8) * 13).reshape(2, 3, 3)
        msg = rgb_to_compressed(probe, "png", msg=CompressedImage())
        got = bridge.compressed_imgmsg_to_cv2(msg, "passthrough")[:, :, ::-1]
        if not np.array_equal(got, probe):
            return None
    except Exception:  # noqa: BLE001 - absent or broken: use the PyPI decoders
        return None

    def decode(fmt: str, data) -> np.ndarray:
        msg = CompressedImage(format=fmt, data=bytes(data))
        try:
            pixels = bridge.compressed_imgmsg_to_cv2(msg, "passthrough")
        except Exception as e:  # noqa: BLE001 - cv_bridge raises CvBridgeError, cv2.error
            raise InputError(f"corrupt {fmt.upper()} data: {e}") from None
        if pixels is None or pixels.dtype != np.uint8 or pixels.ndim not in (2, 3):
            raise InputError(f"corrupt or unsupported {fmt.upper()} data")
        if pixels.ndim == 2:
            return np.repeat(pixels[:, :, None], 3, axis=2)
        if pixels.shape[2] != 3:
            raise InputError(f"{fmt.upper()} decodes to {pixels.shape[2]} channels; publish RGB or gray")
        return np.ascontiguousarray(pixels[:, :, ::-1])      # OpenCV decodes to BGR

    return "cv_bridge (OpenCV)", decode


@lru_cache(maxsize=1)
def decoder():
    """(name, decode(format, data) -> HxWx3 uint8 RGB): cv_bridge where it works (a ROS
    install), else the PyPI decoders. Chosen once per process."""
    return _cv_bridge_decoder() or _pypi_decoder()


def compressed_to_rgb(msg) -> np.ndarray:
    """sensor_msgs/CompressedImage -> HxWx3 uint8 RGB. Called once per control frame for the
    frame's image, never per arriving message; corrupt data raises InputError."""
    fmt, h, w = check_compressed(msg)
    rgb = decoder()[1](fmt, msg.data)
    if rgb.shape[:2] != (h, w):
        raise InputError(f"{fmt.upper()} header says {w}x{h} but the data decodes to "
                         f"{rgb.shape[1]}x{rgb.shape[0]}")
    return rgb


def rgb_to_compressed(rgb: np.ndarray, fmt: str = "jpeg", quality: int = 90, msg=None):
    """HxWx3 uint8 RGB -> sensor_msgs/CompressedImage (format "jpeg" or "png"); the inverse of
    `compressed_to_rgb` (exact for PNG). Used by the simulator, the recorder and test drivers."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if fmt == "jpeg":
        try:
            import simplejpeg
            data = simplejpeg.encode_jpeg(rgb, quality=quality, colorspace="RGB")
        except ImportError:
            data = _pil_encode(rgb, "JPEG", quality=quality)
    elif fmt == "png":
        data = _pil_encode(rgb, "PNG", compress_level=1)     # fast; PNG is lossless at any level
    else:
        raise InputError(f"rgb_to_compressed writes jpeg or png, got {fmt!r}")
    if msg is None:
        from sensor_msgs.msg import CompressedImage
        msg = CompressedImage()
    msg.format, msg.data = fmt, data
    return msg


def _pil_encode(rgb: np.ndarray, kind: str, **options) -> bytes:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, kind, **options)
    return buf.getvalue()


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


def trajectory_msg(joint_names, chunk, stamp_ns: int | None = None):
    """A node.chunk_plan.PlannedChunk as a JointTrajectory: header.stamp at the chunk's
    action 0 (`stamp_ns` when given: the observation's exact stamp, which float seconds
    would round by ~100 ns), each point at its own time_from_start (velocities only where
    planned)."""
    from builtin_interfaces.msg import Duration, Time
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    msg = JointTrajectory()
    ns = int(round(chunk.stamp_s * 1e9)) if stamp_ns is None else int(stamp_ns)
    msg.header.stamp = Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
    msg.joint_names = list(joint_names)
    for i, (t, row) in enumerate(zip(chunk.times, chunk.positions)):
        ns = int(round(float(t) * 1e9))
        point = JointTrajectoryPoint(positions=[float(x) for x in row],
                                     time_from_start=Duration(sec=ns // 1_000_000_000,
                                                              nanosec=ns % 1_000_000_000))
        if chunk.velocities is not None:
            point.velocities = [float(x) for x in chunk.velocities[i]]
        msg.points.append(point)
    return msg


def frame_timing_msg(result, obs_stamp_ns: int, period_s: float, chunk_ms: float = 0.0,
                     chunk_latency_ms: float = 0.0, points_dropped: int = 0, rtc_delay_steps: int = 0):
    """A FrameResult as an oxygen_msgs/FrameTiming (unstamped: the caller stamps it when
    it publishes). Vision time counts as prefill, as the message documents; the chunk_*
    figures are the node's (when it published the trajectory)."""
    from builtin_interfaces.msg import Time
    from oxygen_msgs.msg import FrameTiming

    ms = result.timings_ms
    period_ms = period_s * 1e3
    return FrameTiming(
        frame_index=result.frame_index,
        observation_stamp=Time(sec=obs_stamp_ns // 1_000_000_000, nanosec=obs_stamp_ns % 1_000_000_000),
        prefill_ms=ms.get("vision", 0.0) + ms["prefill"], action_ms=ms["action"],
        admit_ms=ms["admit"], decode_ms=ms["decode"], total_ms=ms["total"],
        decode_steps=result.decode_steps, live_requests=result.live_requests,
        queued_requests=result.queued_requests, tokens_emitted=result.tokens_emitted,
        period_ms=period_ms, deadline_missed=ms["total"] > period_ms,
        kv_bytes_in_use=result.kv_bytes_in_use, chunk_ms=chunk_ms, chunk_latency_ms=chunk_latency_ms,
        points_dropped=points_dropped, rtc_delay_steps=rtc_delay_steps,
        expert_names=list(result.expert_actions),
        expert_action_ms=[float(ms.get(f"action:{n}", 0.0)) for n in result.expert_actions])


def merge_deltas(deltas: list[TextDelta]) -> list[TextDelta]:
    """Join a frame's deltas per request (a request yields one delta per decoded token),
    keeping the order in which requests first appear. The joined deltas of a request,
    concatenated over frames, equal its full text."""
    merged: dict[int, TextDelta] = {}
    for d in deltas:
        m = merged.get(d.request_id)
        if m is None:
            merged[d.request_id] = TextDelta(d.request_id, d.stream, d.start_frame, d.delta,
                                             d.token_count, d.done, d.full_text, d.error)
            continue
        m.delta += d.delta
        m.token_count = d.token_count
        m.done = m.done or d.done
        m.full_text = d.full_text or m.full_text
        m.error = d.error or m.error
    return list(merged.values())


def text_chunk_msg(d: TextDelta, stamp):
    """A merged delta as an oxygen_msgs/TextChunk stamped `stamp`."""
    from oxygen_msgs.msg import TextChunk

    msg = TextChunk()
    msg.header.stamp = stamp
    msg.stream = d.stream
    msg.request_id = max(0, int(d.request_id))
    msg.start_frame = max(0, int(d.start_frame))
    msg.delta = d.delta
    msg.token_count = int(d.token_count)
    msg.done = bool(d.done)
    msg.full_text = d.full_text if d.done else ""
    return msg
