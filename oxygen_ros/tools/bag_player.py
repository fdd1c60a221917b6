"""Play a recorded run's robot inputs back on their topics, so a node runs offline on real data.

Reads a rosbag2 bag (MCAP or sqlite3, with rosbags) and publishes its camera
(sensor_msgs/Image, sensor_msgs/CompressedImage) and joint state messages on the topics
they were recorded from, with the sensor QoS a robot uses, at the recorded pace (`rate`
times faster). The node's outputs in the bag are not played. Header stamps are moved to
the time of playing (keeping each message's recorded transport delay), so the node's
observation-age checks see a live robot without sim time.

On a ROS install the same bag plays with `ros2 bag play BAG --clock` and the node run with
use_sim_time:=true (the recorded stamps then match the played clock).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from .bag_recorder import message_class

INPUT_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage", "sensor_msgs/msg/JointState")
MAX_KEPT_DELAY_NS = 1_000_000_000   # a larger recorded delay means unrelated clocks: stamp "now"


class BagPlayer:
    def __init__(self, node, bag: str | Path, rate: float = 1.0, namespace: str = ""):
        from rosbags.rosbag2 import Reader

        from ..node import qos

        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.node, self.rate = node, rate
        self.reader = Reader(Path(bag))
        self.reader.open()
        self.connections = [c for c in self.reader.connections if c.msgtype in INPUT_TYPES]
        if not self.connections:
            self.reader.close()
            raise ValueError(f"{bag} holds no camera or joint state topics "
                             "(record them with `oxygen record --cameras`)")
        prefix = "/" + namespace.strip("/") if namespace.strip("/") else ""
        self._pubs, self.counts = {}, {}
        for c in self.connections:
            if c.topic not in self._pubs:
                cls = message_class(c.msgtype)
                self._pubs[c.topic] = (node.create_publisher(cls, prefix + c.topic, qos.SENSOR), cls)
                self.counts[prefix + c.topic] = 0
        self.duration_s = (self.reader.end_time - self.reader.start_time) / 1e9 / rate

    def play(self, stop: threading.Event | None = None, wait_s: float = 2.0) -> dict:
        """Publish every input message at its time, after waiting up to wait_s for every topic
        to have a subscriber; returns messages per topic."""
        from rclpy.serialization import deserialize_message

        stop = stop or threading.Event()
        end = time.monotonic() + wait_s       # let subscribers match, or the first frames are lost
        while time.monotonic() < end and not all(p.get_subscription_count() for p, _ in self._pubs.values()):
            stop.wait(0.05)
        t0 = time.monotonic()
        for conn, t_ns, raw in self.reader.messages(connections=self.connections):
            wait = t0 + (t_ns - self.reader.start_time) / 1e9 / self.rate - time.monotonic()
            if (wait > 0 and stop.wait(wait)) or stop.is_set():
                break
            pub, cls = self._pubs[conn.topic]
            msg = deserialize_message(raw, cls)
            stamp = msg.header.stamp
            delay = t_ns - (stamp.sec * 1_000_000_000 + stamp.nanosec)
            now = self.node.get_clock().now().nanoseconds
            new = now - delay if 0 <= delay <= MAX_KEPT_DELAY_NS else now
            stamp.sec, stamp.nanosec = divmod(new, 1_000_000_000)
            pub.publish(msg)
            self.counts[pub.topic_name] += 1
        return self.counts

    def close(self) -> None:
        for pub, _ in self._pubs.values():
            self.node.destroy_publisher(pub)
        self._pubs = {}
        self.reader.close()
