"""CPU spent on camera images by oxygen_node, and whether its control loop holds its rate
under a camera load (a benchmark that prints numbers; not a test).

    .venv/bin/python scripts/bench_camera_load.py [--seconds 20] [--hz 30] [--size 1280x720]

1. Callback cost (in-process): the node's own image callback (`SensorInputs.on_image`,
   tiny profile, configured) called on 1280x720 rgb8 and bgr8 messages; CPU per call
   (thread time), and the CPU per second it means at 3 cameras x 30 Hz. Also the
   conversion each control tick does for its frame's images (node/convert.py).
2. Per control frame (in-process): CPU to turn the frame's 3 camera messages into the
   model's RGB arrays (node/cameras.py, what the control thread does): raw rgb8 / bgr8
   against JPEG (quality 90) and PNG, on a camera-like scene and on noise (JPEG's worst
   case); and the per-message header check of a compressed camera.
3. End to end (two processes over loopback DDS): oxygen_node (config/tiny.yaml, 10 Hz,
   autostart) while this script publishes 3 cameras x 30 Hz of 1280x720 images, rgb8,
   bgr8, then JPEG (a node with <topic>/compressed cameras), one node process per case;
   the node process's CPU (utime+stime from /proc), the chunks per second it
   published, the largest gap between chunks and the node's warnings (stale inputs,
   overruns), next to a baseline run with 64x48 images at 10 Hz.

DDS stays on this machine (ROS_LOCALHOST_ONLY=1, ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST,
random ROS_DOMAIN_ID), set before rclpy is imported.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.update(ROS_LOCALHOST_ONLY="1", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                  ROS_DOMAIN_ID=os.environ.get("OXYGEN_BENCH_DOMAIN", str(random.SystemRandom().randint(1, 100))))
os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)

import numpy as np  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "config" / "tiny.yaml"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def tiny_params(**overrides) -> dict:
    p = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]
    p.update(overrides)
    return p


def images(w: int, h: int, encoding: str, n: int):
    from oxygen_ros.node.convert import rgb_to_image

    rng = np.random.default_rng(0)
    return [rgb_to_image(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), encoding) for _ in range(n)]


def scene(w: int, h: int, noise: bool) -> np.ndarray:
    """A camera-like frame (gradients, a few flat objects, sensor noise), or uniform noise."""
    rng = np.random.default_rng(1)
    if noise:
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([80 + 100 * x / w, 90 + 60 * y / h, 120 + 0 * x], axis=2)
    for cx, cy, r, color in ((0.3, 0.6, 0.12, (200, 40, 30)), (0.7, 0.5, 0.2, (30, 60, 190)),
                             (0.5, 0.8, 0.08, (230, 220, 60))):
        img[(x - cx * w) ** 2 + (y - cy * h) ** 2 < (r * h) ** 2] = color
    return (img + rng.normal(0, 3, img.shape)).clip(0, 255).astype(np.uint8)


def _cpu_ms(fn, n: int) -> float:
    fn()
    t = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - t) / n * 1e3


def frame_cost(w: int, h: int, frames: int) -> dict:
    """CPU (thread time) per control frame to get 3 cameras' pixels, by transport."""
    import simplejpeg

    from oxygen_ros.node.cameras import Camera
    from oxygen_ros.node.convert import _pil_rgb, decoder, rgb_to_compressed, rgb_to_image

    out = {"decoder": decoder()[0]}
    for content in ("scene", "noise"):
        rgb = scene(w, h, content == "noise")
        kinds = {"raw rgb8": ("raw", lambda: rgb_to_image(rgb, "rgb8")),
                 "raw bgr8": ("raw", lambda: rgb_to_image(rgb, "bgr8")),
                 "jpeg q90": ("compressed", lambda: rgb_to_compressed(rgb, "jpeg", 90)),
                 "png": ("compressed", lambda: rgb_to_compressed(rgb, "png"))}
        for label, (transport, make) in kinds.items():
            cams = [Camera(f"cam{i}", f"slot{i}", transport) for i in range(3)]
            msgs = [make(), make()]            # alternate: every frame decodes a new message
            for cam in cams:
                cam.check(msgs[0])
            n = frames if label != "png" else max(3, frames // 4)
            t = time.thread_time()
            for f in range(n):
                for cam in cams:
                    cam.rgb(msgs[f % 2])
            frame_ms = (time.thread_time() - t) / n * 1e3
            t = time.thread_time()
            for f in range(200):
                cams[0].check(msgs[f % 2])
            check_us = (time.thread_time() - t) / 200 * 1e6
            size = len(msgs[0].data)
            out[f"{content}: {label}"] = {"frame_ms_3_cameras": round(frame_ms, 2), "check_us": round(check_us, 1),
                                          "kb_per_image": round(size / 1024, 1)}
        jpeg = rgb_to_compressed(rgb, "jpeg", 90).data
        out[f"{content}: one JPEG, by decoder (ms)"] = {
            name: round(_cpu_ms(lambda: decode(jpeg), 20), 2) for name, decode in (
                ("simplejpeg", lambda d: simplejpeg.decode_jpeg(d, colorspace="RGB")),
                ("Pillow", lambda d: _pil_rgb(d, "JPEG")))}
    return out


def callback_cost(w: int, h: int, hz: float, calls: int) -> dict:
    """CPU per image callback of an in-process, configured OxygenNode."""
    import rclpy
    from rclpy.parameter import Parameter

    from oxygen_ros.node import convert
    from oxygen_ros.node.oxygen_node import OxygenNode

    rclpy.init(args=[])
    node = OxygenNode(parameter_overrides=[Parameter(k, value=v) for k, v in tiny_params().items()])
    try:
        node.trigger_configure()
        inputs = node.runtime.inputs          # the robot's inputs object, as its subscriptions call it
        cams = list(inputs.cameras)
        out = {}
        for enc in ("rgb8", "bgr8"):
            msgs = images(w, h, enc, len(cams))
            for cam, m in zip(cams, msgs):          # warm-up
                inputs.on_image(cam, m)
            t = time.thread_time()
            for i in range(calls):
                inputs.on_image(cams[i % len(cams)], msgs[i % len(cams)])
            per_call_ms = (time.thread_time() - t) / calls * 1e3
            t = time.thread_time()
            for i in range(calls):
                convert.image_to_rgb(msgs[i % len(cams)])
            convert_ms = (time.thread_time() - t) / calls * 1e3
            out[enc] = {"callback_ms": round(per_call_ms, 4),
                        "callback_cpu_pct_at_load": round(per_call_ms * len(cams) * hz / 10, 2),
                        "convert_ms": round(convert_ms, 3)}
        return out
    finally:
        node.close()
        node.destroy_node()
        rclpy.try_shutdown()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def end_to_end(cases, seconds: float) -> dict:
    """cases: [(label, camera messages, rate)]; each runs against its own node process (a
    camera's size is fixed by its first image), warmed up until its first chunk."""
    import rclpy

    rclpy.init(args=[])
    try:
        return {label: _node_under_load(msgs, rate, seconds) for label, msgs, rate in cases}
    finally:
        rclpy.try_shutdown()


def _node_under_load(msgs, rate: float, seconds: float) -> dict:
    """Start a tiny oxygen_node for `msgs` (Image or CompressedImage, one per camera), publish
    them at `rate` for `seconds`: the node's CPU, its chunks and warnings meanwhile."""
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import CompressedImage, JointState
    from trajectory_msgs.msg import JointTrajectory

    from oxygen_ros.node import qos
    from oxygen_ros.node.cameras import compressed_topic

    params = tiny_params(autostart=True)
    compressed = isinstance(msgs[0], CompressedImage)
    if compressed:
        params["camera_topics"] = [compressed_topic(t) for t in params["camera_topics"]]
    with tempfile.TemporaryDirectory() as tmp:
        pf = Path(tmp, "params.yaml")
        pf.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
        ns = f"/bench_{random.randrange(1 << 30):x}"
        log = open(Path(tmp, "node.log"), "w")
        proc = subprocess.Popen([sys.executable, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(pf),
                                 "-r", f"__ns:={ns}"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        import rclpy

        node = rclpy.create_node("camera_load_bench")
        ex = SingleThreadedExecutor()
        ex.add_node(node)
        pubs = [node.create_publisher(type(m), f"{ns}/{t}", qos.SENSOR) for m, t in zip(msgs, params["camera_topics"])]
        jpub = node.create_publisher(JointState, f"{ns}/{params['joint_state_topic']}", qos.SENSOR)
        chunks = []
        node.create_subscription(JointTrajectory, f"{ns}/{params['trajectory_topic']}",
                                 lambda m: chunks.append(time.monotonic()), qos.CONTROL)
        names = params["joint_names"]

        def publish(stamp):
            for pub, m in zip(pubs, msgs):
                m.header.stamp = stamp
                pub.publish(m)
            js = JointState(name=names, position=[0.0] * len(names))
            js.header.stamp = stamp
            jpub.publish(js)

        try:
            end = time.monotonic() + 60
            while not chunks:                  # node up, configured, active, ticking
                if time.monotonic() > end or proc.poll() is not None:
                    raise RuntimeError("the node produced no chunk: " + Path(tmp, "node.log").read_text()[-2000:])
                publish(node.get_clock().now().to_msg())
                ex.spin_once(timeout_sec=0.05)
            period = 1.0 / rate
            chunks.clear()
            log.flush()
            log_at = Path(log.name).stat().st_size
            c0, t0 = _cpu_s(proc.pid), time.monotonic()
            next_t, sent = t0, 0
            while time.monotonic() - t0 < seconds:
                now = time.monotonic()
                if now >= next_t:
                    publish(node.get_clock().now().to_msg())
                    sent += 1
                    next_t += period
                    if next_t < now:           # publisher fell behind: do not burst
                        next_t = now + period
                ex.spin_once(timeout_sec=max(0.0, min(0.005, next_t - time.monotonic())))
            elapsed = time.monotonic() - t0
            cpu = _cpu_s(proc.pid) - c0
            ts = [t for t in chunks if t >= t0 + 1.0]      # after the first second
            gaps = [b - a for a, b in zip(ts, ts[1:])]
            new_log = Path(log.name).read_text(errors="replace")[log_at:]
            problems = sorted({line.split("]: ", 1)[-1][:100] for line in new_log.splitlines()
                               if "WARN" in line or "ERROR" in line})
            return {"node_problems": problems[:5], "camera_hz_sent": round(sent / elapsed, 1),
                    "node_cpu_pct": round(100 * cpu / elapsed, 1),
                    "chunks_per_s": round(len(ts) / (elapsed - 1.0), 2),
                    "max_chunk_gap_s": round(max(gaps), 3) if gaps else None}
        finally:
            ex.shutdown(timeout_sec=1.0)
            node.destroy_node()
            proc.send_signal(2)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds per end-to-end run")
    ap.add_argument("--hz", type=float, default=30.0, help="camera rate")
    ap.add_argument("--size", default="1280x720", help="WxH of the camera images")
    ap.add_argument("--calls", type=int, default=300, help="callback calls in the in-process part")
    ap.add_argument("--frames", type=int, default=40, help="control frames in the per-frame part")
    ap.add_argument("--skip-e2e", action="store_true", help="only the in-process callback cost")
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = ap.parse_args()
    w, h = map(int, args.size.split("x"))
    result = {"size": args.size, "camera_hz": args.hz, "cameras": 3,
              "callback": callback_cost(w, h, args.hz, args.calls)}
    print("image callback (in-process, CPU per call):")
    for enc, r in result["callback"].items():
        print(f"  {enc}: {r['callback_ms']:.3f} ms per callback -> {r['callback_cpu_pct_at_load']:.1f}% of a core "
              f"at 3 x {args.hz:g} Hz; conversion of one image {r['convert_ms']:.2f} ms")
    result["frame"] = frame_cost(w, h, args.frames)
    print(f"per control frame, 3 cameras {args.size} to RGB (CPU; decoder: {result['frame']['decoder']}):")
    for label, r in result["frame"].items():
        if "by decoder" in label:
            print(f"  {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
        elif label != "decoder":
            print(f"  {label:18s} {r['frame_ms_3_cameras']:7.2f} ms per frame   check per message "
                  f"{r['check_us']:6.1f} us   {r['kb_per_image']:8.1f} KiB per image")
    if not args.skip_e2e:
        from oxygen_ros.node.convert import rgb_to_compressed

        cases = [("64x48 rgb8 at 10 Hz (baseline)", images(64, 48, "rgb8", 3), 10.0)]
        cases += [(f"{w}x{h} {enc} at {args.hz:g} Hz", images(w, h, enc, 3), args.hz) for enc in ("rgb8", "bgr8")]
        cases.append((f"{w}x{h} jpeg q90 at {args.hz:g} Hz",
                      [rgb_to_compressed(scene(w, h, False), "jpeg", 90) for _ in range(3)], args.hz))
        result["end_to_end"] = end_to_end(cases, args.seconds)
        print("oxygen_node process (tiny, 10 Hz) under camera load:")
        for label, r in result["end_to_end"].items():
            print(f"  {label:28s} sent {r['camera_hz_sent']:5.1f} Hz/camera  node CPU {r['node_cpu_pct']:5.1f}%  "
                  f"chunks {r['chunks_per_s']:5.2f}/s  max gap {r['max_chunk_gap_s']} s")
            for line in r["node_problems"]:
                print(f"      node: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
