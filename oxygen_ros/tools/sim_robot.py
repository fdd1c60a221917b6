"""The simulated robot as a ROS 2 node: SimWorld's cameras and joint states out, chunks in.

Publishes sensor_msgs/Image (rgb8) on the camera topics, or sensor_msgs/CompressedImage
(JPEG or PNG) on those the node takes compressed (camera_transports, or a name ending in
/compressed) and, with `compressed`, on <topic>/compressed for every camera (image_transport's
name); and sensor_msgs/JointState on
the joint state topic with the node's sensor QoS (best effort, keep last). Every
trajectory_msgs/JointTrajectory it receives (reliable) goes to a TrajectoryExecutor, which
accepts or rejects it as a Jazzy joint_trajectory_controller would (header stamp honoured,
points already past skipped); a control timer samples it on the ROS clock and commands the
world, so the loop through oxygen_node is closed. `executor.jumps` records every chunk
boundary; `summary()` sums them up. The topic names, joint names and limits are the node's
(from its params file).
"""
from __future__ import annotations

from .sim_world import SimWorld
from .trajectory_executor import TrajectoryExecutor, TrajectoryRejected, jump_stats

VIEW_OF_SLOT = ("base", "left_wrist", "right_wrist")   # camera_topics order = the model's slots


class SimRobot:
    def __init__(self, node, params: dict, image_size: int = 160, camera_hz: float = 15.0,
                 joint_hz: float = 50.0, compressed: str = "", jpeg_quality: int = 90,
                 control_hz: float = 100.0):
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from trajectory_msgs.msg import JointTrajectory

        from ..node import qos
        from ..node.cameras import compressed_topic, transport_of

        self.node = node
        self.world = SimWorld(params["joint_names"], params["joint_lower_limits"], params["joint_upper_limits"])
        self.executor = TrajectoryExecutor(self.world.names, self.world.q)
        self.size = image_size
        self._JointState = JointState
        topics = params.get("camera_topics", ["camera/base/image_raw"])
        transports = list(params.get("camera_transports", []))
        self.cameras = []       # (publisher, view, format: "" = raw rgb8)
        for i, t in enumerate(topics):
            fmt = compressed
            if transport_of(t, transports[i] if i < len(transports) else "auto") == "compressed":
                fmt = compressed or "jpeg"
            elif compressed:
                t = compressed_topic(t)
            pub = node.create_publisher(CompressedImage if fmt else Image, t, qos.SENSOR)
            self.cameras.append((pub, VIEW_OF_SLOT[i % 3], fmt))
        self.jpeg_quality = jpeg_quality
        self.joint_pub = node.create_publisher(JointState, params.get("joint_state_topic", "joint_states"),
                                               qos.SENSOR)
        node.create_subscription(JointTrajectory, params.get("trajectory_topic", "joint_trajectory"),
                                 self._on_trajectory, qos.CONTROL)
        self.chunks = 0         # trajectories accepted
        self.rejected = 0
        self.frames = 0
        self._last = self._now()
        node.create_timer(1.0 / control_hz, self._on_control_tick)
        node.create_timer(1.0 / joint_hz, self._on_joint_tick)
        node.create_timer(1.0 / camera_hz, self._on_camera_tick)

    def _now(self) -> float:
        return self.node.get_clock().now().nanoseconds / 1e9

    def _on_trajectory(self, msg) -> None:
        pts = msg.points
        velocities = [list(p.velocities) for p in pts]
        try:
            self.executor.receive(
                list(msg.joint_names), msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9,
                [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in pts],
                [list(p.positions) for p in pts],
                velocities if any(velocities) else None, now=self._now())
        except TrajectoryRejected as e:
            self.rejected += 1
            self.node.get_logger().warning(f"trajectory rejected: {e}", throttle_duration_sec=2.0)
            return
        self.chunks += 1

    def _on_control_tick(self) -> None:
        now = self._now()
        self.world.command(self.executor.sample(now)[0])
        self.world.step(max(0.0, now - self._last))     # a clock jumping back moves nothing
        self._last = now

    def _on_joint_tick(self) -> None:
        msg = self._JointState(name=self.world.names, position=self.world.q.tolist())
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.joint_pub.publish(msg)

    def summary(self) -> dict:
        """jump_stats of the chunk boundaries so far, and how many trajectories were rejected."""
        return {**jump_stats(self.executor.jumps), "rejected": self.rejected}

    def _on_camera_tick(self) -> None:
        from ..node.convert import rgb_to_compressed, rgb_to_image

        stamp = self.node.get_clock().now().to_msg()
        for pub, view, fmt in self.cameras:
            rgb = self.world.render(view, self.size)
            msg = rgb_to_compressed(rgb, fmt, self.jpeg_quality) if fmt else rgb_to_image(rgb, "rgb8")
            msg.header.stamp = stamp
            msg.header.frame_id = f"{view}_camera"
            pub.publish(msg)
        self.frames += 1
