"""A recorded run as a captioned video: the scene camera, with what the model said and did.

`oxygen report BAG --video FILE.mp4` renders one sensor_msgs/CompressedImage camera of a bag
(recorded with `oxygen record --cameras` or `oxygen demo --record-cameras`) into an H.264
MP4 (yuv420p, even size; imageio + imageio-ffmpeg) and the still FILE.png beside it.

- Frames: the video's fps is the camera's recorded rate (rounded, at least 1); video frame
  k shows the latest camera image taken by first + k/fps, so each image lasts as long as
  it did on the robot and the video is as long as the recording.
- Every frame is scaled to HEIGHT px tall and gets a caption panel below it (Pillow's
  default font): the time since the run started, the number of action chunks so far, and
  the latest narration, memory entry and answer, each as far as it had been decoded at
  that moment (TextChunks accumulate; the question of an answer is not in the bag:
  TextChunk carries no question).
- A new action chunk (JointTrajectory) is marked for MARK_S after it: a MARKER_COLOR
  border around the image and a "chunk N" label.
- The still: a marked frame from the middle half of the run with the most caption text.

Times are header stamps (the node's clock, as in bag_read); a camera image without a
stamp uses the bag's receive time. Images are decoded one at a time (two passes over the
bag), so long runs fit in memory; a corrupt image repeats the previous one.
"""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .bag_read import RunData, bag_dir, read_bag, typestore_for
from .bag_summary import time_origin
from .report import STREAM_COLORS

CAMERA = "sensor_msgs/msg/CompressedImage"
HEIGHT = 480                   # camera image height in the video (px); robot cameras are often 224
MIN_WIDTH = 640                # room for the captions beside a narrow image
MARK_S = 0.3                   # how long a new chunk stays marked (s)
MARKER_COLOR = (255, 140, 0)   # orange: rare in a scene, survives yuv420p
BORDER = 10                    # marker border width (px; wide enough for chroma subsampling)
FONT_SIZE = 16
LINE_H = 20
STREAM_LINES = {"narration": 2, "memory": 2, "answer": 3}   # caption lines per stream (the newest text)
PANEL_H = LINE_H * (1 + sum(STREAM_LINES.values())) + 12
PROGRESS_S = 3.0               # progress line interval for long videos


class VideoError(ValueError):
    """A bag or option that cannot give a video; the message says what to do."""


def camera_topics(bag) -> list[str]:
    from rosbags.rosbag2 import Reader

    with Reader(bag_dir(bag)) as reader:
        return [c.topic for c in reader.connections if c.msgtype == CAMERA]


def choose_camera(bag, wanted: str | None = None) -> str:
    """`wanted`, else the first camera topic naming "base" (the scene camera), else the first."""
    topics = camera_topics(bag)
    if not topics:
        raise VideoError(f"{bag}: no camera topic ({CAMERA}) in the bag; record one with "
                         "`oxygen record --cameras` (or `oxygen demo --record-cameras`)")
    if wanted is not None:
        if wanted not in topics:
            raise VideoError(f"{wanted}: not a camera topic of {bag}; its camera topics: {', '.join(topics)}")
        return wanted
    return next((t for t in topics if "base" in t), topics[0])


def _camera_messages(bag, topic: str):
    """(time s, deserialised CompressedImage) of `topic` in bag order."""
    from rosbags.rosbag2 import Reader

    with Reader(bag_dir(bag)) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        store = typestore_for(conns)
        for conn, log_ns, raw in reader.messages(connections=conns):
            msg = store.deserialize_cdr(raw, conn.msgtype)
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            yield (stamp if stamp > 0 else log_ns * 1e-9), msg


@dataclass
class Caption:
    t: float               # seconds since the run started
    chunk: int             # action chunks so far (0: none yet)
    marked: bool           # a new chunk within MARK_S
    texts: dict            # stream -> text so far ("" if none yet)

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.texts.values())


class Captions:
    """What the panel says at any time: the streams' latest texts so far and the chunk count."""

    def __init__(self, data: RunData, t0: float, window: float):
        self.t0, self.window = t0, window
        self.chunk_stamps = [c[0] for c in data.chunks]
        self.streams = {}     # stream -> (first chunk times, requests), in start order
        for r in data.requests:
            times, reqs = self.streams.setdefault(r.stream, ([], []))
            times.append(r.chunks[0][0])
            reqs.append(r)

    @staticmethod
    def _so_far(r, t: float) -> str:
        chunks = [c for c in r.chunks if c[0] <= t]
        final = [c[4] for c in chunks if c[3] and c[4]]
        return final[-1] if final else "".join(c[1] for c in chunks)

    def text(self, stream: str, t: float) -> str:
        times, reqs = self.streams.get(stream, ([], []))
        # the newest request with text by t (a request that just started has none yet: keep the last)
        for i in range(bisect.bisect_right(times, t) - 1, -1, -1):
            text = " ".join(self._so_far(reqs[i], t).split())
            if text:
                return text
        return ""

    def at(self, t: float) -> Caption:
        n = bisect.bisect_right(self.chunk_stamps, t)
        marked = n > 0 and t - self.chunk_stamps[n - 1] < self.window
        return Caption(t - self.t0, n, marked, {s: self.text(s, t) for s in STREAM_LINES})


def _font():
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=FONT_SIZE)     # Pillow's own FreeType font: nothing to download
    except (TypeError, OSError):                           # an old Pillow or one without FreeType
        return ImageFont.load_default()


def _wrap(text: str, font, width: float) -> list[str]:
    """Greedy word wrap to `width` px."""
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}" if line else word
        if line and font.getlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + [line] if line else lines


def render(rgb: np.ndarray, cap: Caption, size: tuple[int, int], font):
    """One video frame (PIL RGB image): the camera image `size` (w, h) over the caption panel."""
    from PIL import Image, ImageDraw

    w, h = size
    W = max(w, MIN_WIDTH)
    frame = Image.new("RGB", (W, h + PANEL_H), "white")
    frame.paste(Image.fromarray(rgb).resize((w, h), Image.BICUBIC), ((W - w) // 2, 0))
    draw = ImageDraw.Draw(frame)
    if cap.marked:
        draw.rectangle([0, 0, W - 1, h - 1], outline=MARKER_COLOR, width=BORDER)
        label = f"chunk {cap.chunk}"
        x0, y0 = BORDER + 4, BORDER + 4
        draw.rectangle([x0, y0, x0 + font.getlength(label) + 12, y0 + LINE_H + 4], fill=MARKER_COLOR)
        draw.text((x0 + 6, y0 + 2), label, fill="black", font=font)
    y = h + 6
    draw.text((10, y), f"t {cap.t:6.1f} s    action chunks: {cap.chunk}", fill="black", font=font)
    for stream, max_lines in STREAM_LINES.items():
        y += LINE_H
        label = f"{stream}: "
        draw.text((10, y), label, fill=STREAM_COLORS[stream], font=font)
        indent = 10 + font.getlength("narration: ")
        lines = _wrap(cap.texts[stream], font, W - indent - 10)
        if len(lines) > max_lines:          # the newest text is what changes: keep the last lines
            lines = lines[-max_lines:]
            lines[0] = "... " + lines[0]
        for i, line in enumerate(lines or [""]):
            draw.text((indent, y + i * LINE_H), line, fill="black", font=font)
        y += LINE_H * (max_lines - 1)
    return frame


def _even(x: float) -> int:
    return max(2, int(round(x / 2)) * 2)


def _print(line: str) -> None:
    print(line, flush=True)        # progress shows while ffmpeg works, also when piped


def write_video(bag, out: str | Path, camera: str | None = None, log=_print) -> dict:
    """Write the captioned MP4 `out` and the still `out` with .png; returns what was written."""
    import imageio.v2 as imageio

    from ..node.convert import InputError, compressed_to_rgb

    bag, out = bag_dir(bag), Path(out)
    topic = choose_camera(bag, camera)
    # pass 1: the camera's times (no decoding) and the run's text and chunks
    times = np.maximum.accumulate([t for t, _ in _camera_messages(bag, topic)])   # a stamp never goes back
    if len(times) == 0:
        raise VideoError(f"{topic}: no messages in {bag}")
    dt = np.diff(times)
    dt = dt[dt > 0]
    fps = max(1, int(round(1.0 / np.median(dt)))) if len(dt) else 1
    n = int(round((times[-1] - times[0]) * fps)) + 1
    video_t = times[0] + np.arange(n) / fps
    shows = np.searchsorted(times, video_t + 1e-6, side="right") - 1      # camera image of each video frame
    data = read_bag(bag)
    t0 = min(time_origin(data), times[0]) if (data.frames or data.chunks or data.requests) else times[0]
    captions = Captions(data, t0, max(MARK_S, 1.0 / fps))     # at a low fps every chunk still gets a frame
    caps = [captions.at(t) for t in video_t]
    mid, span = video_t[0] + (video_t[-1] - video_t[0]) / 2, video_t[-1] - video_t[0]
    still = max(range(n), key=lambda k: (abs(video_t[k] - mid) <= span / 4, caps[k].marked, caps[k].size,
                                         -abs(video_t[k] - mid)))
    # pass 2: decode each camera image once, write it for as many video frames as it lasted
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    font, size, rgb, k, last_log = _font(), None, None, 0, time.monotonic()
    writer = imageio.get_writer(out, format="FFMPEG", fps=fps, codec="libx264", pixelformat="yuv420p",
                                quality=7, macro_block_size=2, ffmpeg_log_level="error")
    try:
        for i, (_, msg) in enumerate(_camera_messages(bag, topic)):
            if k >= n:
                break
            if shows[k] != i:
                continue                    # an image replaced before the next video frame
            try:
                rgb = compressed_to_rgb(msg)
            except InputError:              # a corrupt image: show the previous one (black at the start)
                rgb = rgb if rgb is not None else np.zeros((HEIGHT, HEIGHT * 4 // 3, 3), np.uint8)
            if size is None:                # every frame at the first image's scaled size
                size = (_even(rgb.shape[1] * HEIGHT / rgb.shape[0]), HEIGHT)
            while k < n and shows[k] == i:
                frame = render(rgb, caps[k], size, font)
                if k == still:
                    frame.save(png)
                writer.append_data(np.asarray(frame))
                k += 1
                if time.monotonic() - last_log > PROGRESS_S:
                    log(f"video: {k}/{n} frames")
                    last_log = time.monotonic()
    finally:
        writer.close()
    info = {"mp4": str(out), "png": str(png), "camera": topic, "frames": n, "fps": fps,
            "length_s": n / fps, "size_mb": out.stat().st_size / 1e6,
            "width": max(size[0], MIN_WIDTH), "height": size[1] + PANEL_H}
    log(f"wrote {out} ({info['size_mb']:.1f} MB, {info['length_s']:.1f} s, {n} frames at {fps} fps, "
        f"{info['width']}x{info['height']}, camera {topic}) and {png}")
    return info
