"""oxygen_node's cameras over real DDS: sensor_msgs/CompressedImage (JPEG, PNG) next to raw
sensor_msgs/Image, the per-camera view transforms, and bad compressed input.

The node runs with publish_camera_views, so the test sees each frame's images as the model
gets them (decoded and transformed, before the model's resize) on ~/camera_view/<slot>.
Run by pytest; this file is also the driver peer program.
"""

import time

import numpy as np
import pytest

from node_harness import start_node  # noqa: F401 - pytest fixture
from ros_helpers import run_as_peer, run_peers

ERROR = 2
SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
CODEC_TOPICS = ["camera/base/image_raw", "camera/left_wrist/image_raw/compressed", "camera/right_wrist/png"]
H, W = 60, 80


def asym_image(flip: bool = False) -> np.ndarray:
    """Asymmetric and smooth (JPEG keeps it close): R runs with x, G with y, B is a blob
    off-centre. flip=True gives a clearly different image."""
    y, x = np.mgrid[0:H, 0:W]
    blob = 255 * np.exp(-((x - 0.7 * W) ** 2 + (y - 0.3 * H) ** 2) / 150.0)
    rgb = np.stack([x * 255 / (W - 1), y * 255 / (H - 1), blob], axis=2).round().astype(np.uint8)
    return 255 - rgb if flip else rgb


# ----------------------------------------------------------------- driver peers

class Views:
    """The latest ~/camera_view/<slot> image of each slot, with its arrival time."""

    def __init__(self, d):
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image

        from oxygen_ros.node.convert import image_to_rgb

        self.latest = {}
        for slot in SLOTS:
            d.node.create_subscription(
                Image, f"{d.fqn}/camera_view/{slot}",
                lambda m, s=slot: self.latest.__setitem__(s, (time.monotonic(), image_to_rgb(m))),
                qos_profile_sensor_data)

    def after(self, t: float) -> dict:
        return {s: img for s, (at, img) in self.latest.items() if at > t}


def _diff(a, b):
    if a.shape != b.shape:
        return {"shape": list(a.shape), "expected": list(b.shape)}
    d = np.abs(a.astype(int) - b.astype(int))
    return {"max": int(d.max()), "mean": float(d.mean())}


def _bad(kind):
    """A CompressedImage that the node must reject, by kind."""
    import io

    from PIL import Image as PILImage
    from sensor_msgs.msg import CompressedImage

    from oxygen_ros.node.convert import rgb_to_compressed

    good = rgb_to_compressed(asym_image(), "jpeg", quality=95)
    if kind == "corrupt_jpeg":              # header intact, scan data cut: only decoding finds it
        return CompressedImage(format="jpeg", data=bytes(good.data)[: len(good.data) // 2])
    if kind == "unknown_format":
        return CompressedImage(format="bmp", data=bytes(good.data))
    if kind == "png_alpha":
        buf = io.BytesIO()
        PILImage.fromarray(np.dstack([asym_image(), asym_image()[:, :, :1]])).save(buf, "PNG")
        return CompressedImage(format="png", data=buf.getvalue())
    if kind == "png_16bit":
        buf = io.BytesIO()
        PILImage.fromarray(asym_image()[:, :, 0].astype(np.uint16) * 257).save(buf, "PNG")
        return CompressedImage(format="png", data=buf.getvalue())
    if kind == "size_change":
        return rgb_to_compressed(np.zeros((H // 2, W // 2, 3), np.uint8), "jpeg")
    raise ValueError(kind)


BAD = [  # (camera, kind, what the diagnostics and the log must say)
    (1, "corrupt_jpeg", "corrupt JPEG data"),
    (1, "unknown_format", "unknown compressed image format 'bmp'"),
    (2, "png_alpha", "PNG has an alpha channel"),
    (2, "png_16bit", "PNG has 16 bits per channel"),
    (1, "size_change", "image size changed mid-run from 80x60 to 40x30"),
]


def codecs_run(namespace, *, deadline):
    from sensor_msgs.msg import CompressedImage, Image

    from node_driver import Driver
    from oxygen_ros.node.convert import rgb_to_compressed, rgb_to_image

    def encoded(rgb):
        return [rgb_to_image(rgb, "bgr8"), rgb_to_compressed(rgb, "jpeg", quality=95),
                rgb_to_compressed(rgb, "png")]

    kinds = [Image, CompressedImage, CompressedImage]
    d = Driver(namespace, cameras=list(zip(CODEC_TOPICS, kinds, encoded(asym_image()))))
    views = Views(d)
    out = {}
    try:
        d.wait_until(lambda: d.chunks and len(views.latest) == 3, 30.0, "chunks and camera views")
        t = time.monotonic()
        d.wait_until(lambda: len(views.after(t)) == 3, 5.0, "fresh camera views")
        out["views"] = {s: _diff(img, asym_image()) for s, img in views.after(t).items()}
        out["bad"] = []
        current = asym_image()
        for cam, kind, expected in BAD:
            good = d.good_images[cam]
            d.good_images[cam] = _bad(kind)
            t_bad = time.monotonic()
            time.sleep(1.2)
            counts = dict(d.diag_values.get("inputs", {}))
            if kind == "corrupt_jpeg":           # then a different image: the frames must use it
                current = asym_image(flip=True)
                d.good_images = encoded(current)
            else:
                d.good_images[cam] = good
            t_good = time.monotonic()
            d.wait_until(lambda: d.chunks_since(t_good) >= 3, 5.0, f"chunks after {kind}")
            d.wait_until(lambda: len(views.after(t_good + 0.3)) == 3, 5.0, f"views after {kind}")
            out["bad"].append({
                "kind": kind, "expected": expected, "diag": d.diag_messages(t_bad + 0.3, "inputs"),
                "rejected": counts.get(f"{namespace}/{CODEC_TOPICS[cam]} rejected"),
                "resumed_s": d.chunk_times(t_good)[0] - t_good,
                "view_after": _diff(views.after(t_good + 0.3)[SLOTS[cam]], current)})
        return out
    finally:
        d.close()


def transforms_run(namespace, *, deadline):
    from node_driver import CAMERA_TOPICS, Driver
    from oxygen_ros.node.convert import rgb_to_image

    from sensor_msgs.msg import Image

    d = Driver(namespace, cameras=[(t, Image, rgb_to_image(asym_image(), "rgb8")) for t in CAMERA_TOPICS])
    views = Views(d)
    try:
        d.wait_until(lambda: len(views.latest) == 3, 30.0, "camera views")
        t = time.monotonic()
        d.wait_until(lambda: len(views.after(t)) == 3, 5.0, "fresh camera views")
        return {s: img.tolist() for s, img in views.after(t).items()}
    finally:
        d.close()


# ----------------------------------------------------------------- tests

@pytest.mark.ros
def test_compressed_cameras_give_the_raw_image_and_bad_ones_are_rejected(start_node):
    """A JPEG camera gives the model the image it was encoded from within JPEG's loss, a PNG
    camera exactly, next to a raw bgr8 camera. Corrupt JPEG, an unknown format, PNG with
    alpha or 16 bits and a size change are each rejected: counted in /diagnostics, named
    there and in the log; chunks resume with the next good image, which the frames use."""
    node = start_node(autostart=True, camera_topics=CODEC_TOPICS,
                      camera_transports=["auto", "auto", "compressed"], publish_camera_views=True)
    r = run_peers(__file__, {"driver": ["codecs_run", node.namespace]}, timeout=90)["driver"]
    views = r["views"]
    assert views["base_0_rgb"] == {"max": 0, "mean": 0.0}, views
    assert views["right_wrist_0_rgb"] == {"max": 0, "mean": 0.0}, views       # PNG: lossless
    assert views["left_wrist_0_rgb"]["max"] <= 12 and views["left_wrist_0_rgb"]["mean"] < 1.5, views
    log = node.log()
    for bad in r["bad"]:
        assert any(level == ERROR and bad["expected"] in msg for level, msg in bad["diag"]), bad
        assert bad["rejected"] is not None and int(bad["rejected"]) > 0, bad
        assert bad["expected"] in log, bad["kind"]
        assert bad["resumed_s"] < 1.5, bad
        assert bad["view_after"]["max"] <= 12, bad          # the next good image, not a stale one
    assert node.alive()
    assert "Traceback" not in log


@pytest.mark.ros
def test_each_view_transform_on_an_asymmetric_image(start_node):
    """crop, rotations and flips as parameters, checked pixel by pixel against the
    definition (counter-clockwise rotation; crop first, in the published image's pixels)."""
    node = start_node(autostart=True, publish_camera_views=True,
                      camera_rotations=[90, 0, 270], camera_flips=["none", "vertical", "horizontal"],
                      camera_crops=[0, 0, 0, 0, 10, 5, 50, 40, 0, 0, 0, 0])
    r = run_peers(__file__, {"driver": ["transforms_run", node.namespace]}, timeout=60)["driver"]
    img = asym_image()
    got = {s: np.array(v, dtype=np.uint8) for s, v in r.items()}
    # 90 ccw: output row i, column j shows input row j, column W-1-i (the right edge on top)
    i, j = np.mgrid[0:W, 0:H]
    assert got["base_0_rgb"].shape == (W, H, 3)
    assert np.array_equal(got["base_0_rgb"], img[j, W - 1 - i])
    # crop x 10..59, y 5..44, then upside down
    i, j = np.mgrid[0:40, 0:50]
    assert np.array_equal(got["left_wrist_0_rgb"], img[5 + 39 - i, 10 + j])
    # 270 ccw (= 90 clockwise), then mirrored left-right: output (i, j) shows input (j, i)
    assert np.array_equal(got["right_wrist_0_rgb"], img.transpose(1, 0, 2))
    assert node.alive()


if __name__ == "__main__":
    run_as_peer({"codecs_run": codecs_run, "transforms_run": transforms_run})
