#!/usr/bin/env python3
"""What `oxygen sim` (the MuJoCo Panda) delivers over DDS: joint state and camera rates.

    .venv/bin/python scripts/sim_rates.py [--camera-hz 15] [--image-size 160] [--seconds 10]

Starts `oxygen sim` (config/demo.yaml's topics: three raw cameras, 8 joints), subscribes
as a node would (sensor QoS) on loopback DDS with a random domain, waits out start-up,
then counts messages for --seconds and prints the rate of each topic and the gaps between
joint states (p50, p99, max). The joint states should stay at 100 Hz however many cameras
render: the cameras have their own thread (tools/sim_robot.py).
"""
import argparse
import os
import random
import subprocess
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--camera-hz", default="15")
    ap.add_argument("--image-size", default="160")
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    os.environ.update(ROS_LOCALHOST_ONLY="1", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                      ROS_DOMAIN_ID=str(random.SystemRandom().randint(100, 200)))
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image, JointState

    from oxygen_ros.node import qos

    sim = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "sim", "--quiet", "--camera-hz", a.camera_hz,
                            "--image-size", a.image_size], stdout=subprocess.DEVNULL)
    rclpy.init()
    node = rclpy.create_node("sim_rates")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    counts, joint_times = {}, []

    def counter(name):
        def on_message(_msg):
            counts[name] = counts.get(name, 0) + 1
            if name == "joint_states":
                joint_times.append(time.monotonic())
        return on_message

    node.create_subscription(JointState, "joint_states", counter("joint_states"), qos.SENSOR)
    for cam in ("base", "left_wrist", "right_wrist"):
        node.create_subscription(Image, f"camera/{cam}/image_raw", counter(cam), qos.SENSOR)
    try:
        end = time.monotonic() + 8.0              # start-up: MuJoCo, EGL, discovery
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        counts.clear()
        joint_times.clear()
        t0 = time.monotonic()
        while time.monotonic() < t0 + a.seconds:
            executor.spin_once(timeout_sec=0.01)
        elapsed = time.monotonic() - t0
    finally:
        sim.terminate()
        sim.wait()
        node.destroy_node()
        rclpy.try_shutdown()
    print(", ".join(f"{k} {v / elapsed:.1f} Hz" for k, v in sorted(counts.items())))
    if len(joint_times) > 1:
        gaps = np.diff(joint_times) * 1e3
        print(f"joint state gaps ms: p50 {np.percentile(gaps, 50):.1f}, p99 {np.percentile(gaps, 99):.1f}, "
              f"max {gaps.max():.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
