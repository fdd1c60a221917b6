"""The simulated robot as a ROS 2 node: the MuJoCo Panda's (tools/panda_world.py) cameras
and joint states out, chunks in.

Publishes sensor_msgs/Image (rgb8) on the camera topics, or sensor_msgs/CompressedImage
(JPEG or PNG) on those the node takes compressed (camera_transports, or a name ending in
/compressed) and, with `compressed`, on <topic>/compressed for every camera (image_transport's
name); each camera renders at its own rate (`camera_hz`: one rate for all, or one per
camera), in a camera thread: a render takes 10-25 ms on the CPU and in the executor it
would delay the control updates. The thread renders a snapshot of the physics taken under
the lock the control update steps it under, stamped when it was taken. It publishes sensor_msgs/JointState on the joint state topic (positions
and velocities from the physics, at `joint_hz`: sent from the control update, so at most
`control_hz`), with the node's sensor QoS (best effort, keep last). Every
trajectory_msgs/JointTrajectory it receives (reliable) goes to a TrajectoryExecutor, which
accepts or rejects it as a Jazzy joint_trajectory_controller would (header stamp honoured,
points already past skipped); a control timer (100 Hz) samples it on the ROS clock, sets the
position actuators' targets and advances the physics by the elapsed time (500 Hz substeps),
so the loop through oxygen_node is closed. `executor.jumps` records every chunk
boundary; `summary()` sums them up. The topic names, joint names and limits are the node's
(from its params file): 8 of them, the Panda's 7 arm joints and its finger width. `world`
replaces the Panda (a test passes a fast fake); close() closes it (its renderers).

The sim's ground truth goes out on `tf` (/tf in the root namespace; tf2_msgs/TFMessage,
reliable, as tf2 publishes it) at `tf_hz`, from the control update, stamped with the time
the physics was stepped to (the sim's clock): parent `world`, children `cube`, `bowl` and
`gripper` (the fingertips' centre), metres (the issue 41 contract; tools/cube_place.py
scores it). `seed` places the cube and the bowl (panda_scene.layout); None keeps the
scene's default layout. A world without `frames()` (a test fake) publishes no /tf.

`paced=False` leaves out the control timer and the camera thread: tools/sim_lockstep.py
steps the physics and renders itself, on a sim clock that advances only as far as the node
has acted (`oxygen sim --lockstep`). `blackout` publishes black images (nothing rendered):
the control that shows a narration comes from the image.
"""
from __future__ import annotations

import threading
import time

from .trajectory_executor import TrajectoryExecutor, TrajectoryRejected, jump_stats

VIEW_OF_SLOT = ("base", "left_wrist", "right_wrist")   # camera_topics order = the model's slots
PANDA_JOINTS = "panda_joint1..panda_joint7, panda_finger_width"


def panda_world(params: dict, seed: int | None = None):
    """The MuJoCo Panda for the params' joints (cube and bowl placed by `seed`, if given),
    or a ValueError that says what it takes."""
    names = list(params["joint_names"])
    if len(names) != 8:
        raise ValueError(f"the simulated Panda has 8 joints ({PANDA_JOINTS}, in that order); "
                         f"got {len(names)} joint names: {names}")
    from . import panda_scene
    from .panda_world import PandaWorld     # imports mujoco: only when the Panda is used

    return PandaWorld(names, params["joint_lower_limits"], params["joint_upper_limits"],
                      None if seed is None else panda_scene.layout(seed))


class SimRobot:
    def __init__(self, node, params: dict, image_size: int = 160, camera_hz=15.0,
                 joint_hz: float = 100.0, compressed: str = "", jpeg_quality: int = 90,
                 control_hz: float = 100.0, world=None, tf_hz: float = 20.0, seed: int | None = None,
                 paced: bool = True, blackout: bool = False):
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from trajectory_msgs.msg import JointTrajectory

        from ..node import qos
        from ..node.cameras import compressed_topic, transport_of

        self.node = node
        self.world = world if world is not None else panda_world(params, seed)
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
        rates = list(camera_hz) if isinstance(camera_hz, (list, tuple)) else [camera_hz]
        if len(rates) == 1:
            rates *= len(self.cameras)
        if len(rates) != len(self.cameras) or min(rates, default=1.0) <= 0:
            raise ValueError(f"camera rates {rates}: one positive rate, or one per camera ({len(self.cameras)})")
        self.camera_hz = rates
        self.jpeg_quality = jpeg_quality
        self.blackout = blackout
        self.joint_pub = node.create_publisher(JointState, params.get("joint_state_topic", "joint_states"),
                                               qos.SENSOR)
        node.create_subscription(JointTrajectory, params.get("trajectory_topic", "joint_trajectory"),
                                 self._on_trajectory, qos.CONTROL)
        self.chunks = 0         # trajectories accepted
        self.rejected = 0
        self.frames = [0] * len(self.cameras)      # images published, per camera
        self._last = self._now()
        self._joint_period = 1.0 / joint_hz
        self._next_joint = self._last
        self._joint_slack = 0.5 / control_hz        # a tick a little early still counts
        self.tf_pub = None
        if hasattr(self.world, "frames") and tf_hz > 0:
            from tf2_msgs.msg import TFMessage

            # tf2's own /tf QoS: reliable, volatile, keep last 100
            self.tf_pub = node.create_publisher(TFMessage, "tf", 100)
            self._TFMessage = TFMessage
            self._tf_period, self._next_tf = 1.0 / tf_hz, self._last
        # joint states go out from the control update (so at most control_hz): one callback
        # less per tick matters when renders of ~20 ms share the executor
        self._lock = threading.Lock()           # the physics: stepped by the executor, read by the cameras
        self._stop = threading.Event()
        self._camera_thread = threading.Thread(target=self._camera_loop, name="sim cameras", daemon=True)
        if paced:
            node.create_timer(1.0 / control_hz, self._on_control_tick)
            if self.cameras:
                self._camera_thread.start()

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
        with self._lock:
            self.world.command(self.executor.sample(now)[0])
            self.world.step(max(0.0, now - self._last))     # a clock jumping back moves nothing
        self._last = now
        if now >= self._next_joint - self._joint_slack:     # due (a late tick does not burst)
            self._next_joint = max(self._next_joint + self._joint_period, now)
            self._publish_joints()
        if self.tf_pub is not None and now >= self._next_tf - self._joint_slack:
            self._next_tf = max(self._next_tf + self._tf_period, now)
            self._publish_tf(now)

    def _publish_tf(self, now: float) -> None:
        """The cube's, the bowl's and the gripper's poses in `world`, stamped `now` (the
        time the physics was just stepped to)."""
        from geometry_msgs.msg import TransformStamped
        from rclpy.time import Time

        stamp = Time(nanoseconds=int(round(now * 1e9))).to_msg()
        transforms = []
        for child, (pos, quat) in self.world.frames().items():
            t = TransformStamped()
            t.header.stamp, t.header.frame_id, t.child_frame_id = stamp, "world", child
            t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = map(float, pos)
            r = t.transform.rotation
            r.w, r.x, r.y, r.z = map(float, quat)
            transforms.append(t)
        self.tf_pub.publish(self._TFMessage(transforms=transforms))

    def _publish_joints(self) -> None:
        msg = self._JointState(name=self.world.names, position=self.world.q.tolist(),
                               velocity=self.world.velocities().tolist())
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.joint_pub.publish(msg)

    def summary(self) -> dict:
        """jump_stats of the chunk boundaries so far, and how many trajectories were rejected."""
        return {**jump_stats(self.executor.jumps), "rejected": self.rejected}

    def _camera_loop(self) -> None:
        """Each camera when it is due (a late one goes next, without a burst to catch up);
        the renderers live and are closed in this thread (EGL contexts are per thread)."""
        periods = [1.0 / hz for hz in self.camera_hz]
        due = [time.monotonic()] * len(periods)
        try:
            while True:
                i = min(range(len(due)), key=due.__getitem__)
                if self._stop.wait(max(0.0, due[i] - time.monotonic())):
                    return
                due[i] = max(due[i] + periods[i], time.monotonic())
                with self._lock:
                    state = self.world.snapshot()
                    stamp = self.node.get_clock().now().to_msg()
                self.cameras[i][0].publish(self.camera_msg(i, state, stamp))
                self.frames[i] += 1
        except Exception as e:  # noqa: BLE001 - a render error must be seen, not end the cameras silently
            self.node.get_logger().error(f"sim cameras stopped: {type(e).__name__}: {e}")
        finally:
            self.world.close()

    def camera_msg(self, i: int, state, stamp):
        """Camera i's message of the physics snapshot `state`, stamped `stamp` (call it in
        the thread that owns the renderers)."""
        import numpy as np

        from ..node.convert import rgb_to_compressed, rgb_to_image

        _, view, fmt = self.cameras[i]
        rgb = (np.zeros((self.size, self.size, 3), np.uint8) if self.blackout
               else self.world.render(view, self.size, state))
        msg = rgb_to_compressed(rgb, fmt, self.jpeg_quality) if fmt else rgb_to_image(rgb, "rgb8")
        msg.header.stamp = stamp
        msg.header.frame_id = f"{view}_camera"
        return msg

    def close(self) -> None:
        """Stop the cameras and close the world (the Panda's renderers: an EGL context left
        to exit raises)."""
        self._stop.set()
        if self._camera_thread.is_alive():
            self._camera_thread.join(timeout=5.0)
        self.world.close()
