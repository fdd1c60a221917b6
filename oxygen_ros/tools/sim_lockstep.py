"""The simulated robot on a sim clock that advances only as far as the node has acted
(`oxygen sim --lockstep`, `oxygen eval --clock sim`): how fast the CPU computes a frame then
decides nothing about the episode.

The cycle, in one thread (which owns the renderers):
1. at sim time t, publish /clock t (unless another sim of the fleet publishes it), the joint
   state, /tf and every camera, all stamped t: the observation O(t);
2. wait for a chunk stamped t (the node stamps its chunk at its observation's time): the one
   computed from O(t). A chunk stamped otherwise (the node ticked again before O(t) arrived,
   so it acted on an older observation again) is not executed and is counted (`ignored`);
3. execute it: the trajectory executor and the physics from t to t + period (the node's
   replanning period, 1 / control_rate_hz: sim time per frame), /tf at tf_hz on the way;
   then back to 1 at t + period.
While it waits, the sim time stands still; O(t) is sent again every `resend_s` of wall time
so the node's age limit on inputs (wall clock) does not find it stale. The node must run
with use_sim_time:=true. Sim time starts at START_S (ROS time 0 means "no clock yet").
"""
from __future__ import annotations

import threading
import time

from .sim_robot import SimRobot

START_S = 1.0
STAMP_TOLERANCE_S = 1e-6


class LockstepSim(SimRobot):
    def __init__(self, node, params: dict, period_s: float, publish_clock: bool = True,
                 resend_s: float = 0.25, tf_hz: float = 20.0, control_hz: float = 100.0, **kw):
        if not period_s > 0:
            raise ValueError(f"lock-step period must be positive, got {period_s}")
        self.t = START_S
        super().__init__(node, params, control_hz=control_hz, tf_hz=tf_hz, paced=False, **kw)
        self.period_s, self.resend_s = period_s, resend_s
        self._substep = 1.0 / control_hz
        self._tf_every = max(1, round(control_hz / tf_hz)) if tf_hz > 0 else 0
        self.clock_pub = None
        if publish_clock:
            from rosgraph_msgs.msg import Clock

            self._Clock = Clock
            self.clock_pub = node.create_publisher(Clock, "/clock", 10)    # absolute: one clock for a fleet
        self.cycles = 0          # chunks executed (one per period of sim time)
        self.ignored = 0         # chunks stamped other than the latest observation
        self._acted = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sim lockstep", daemon=True)
        self._thread.start()

    def _now(self) -> float:
        return self.t

    def _stamp(self, t: float):
        from rclpy.time import Time

        return Time(nanoseconds=int(round(t * 1e9))).to_msg()

    def _on_trajectory(self, msg) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        if self._acted.is_set() or abs(stamp - self.t) > STAMP_TOLERANCE_S:
            self.ignored += 1
            return
        before = self.chunks
        super()._on_trajectory(msg)          # the executor accepts it (or counts it rejected)
        if self.chunks > before:
            self._acted.set()

    def _observation(self, t: float) -> list:
        """O(t): the messages to publish, cameras rendered now."""
        stamp = self._stamp(t)
        state = self.world.snapshot()
        return [(pub, self.camera_msg(i, state, stamp)) for i, (pub, _, _) in enumerate(self.cameras)]

    def _publish(self, t: float, cameras: list) -> None:
        if self.clock_pub is not None:
            self.clock_pub.publish(self._Clock(clock=self._stamp(t)))
            time.sleep(0.002)        # the node's clock before its inputs: stamps never ahead of it
        self._publish_joints()
        if self.tf_pub is not None:
            self._publish_tf(t)
        for i, (pub, msg) in enumerate(cameras):
            pub.publish(msg)
            self.frames[i] += 1

    def _publish_joints(self) -> None:
        msg = self._JointState(name=self.world.names, position=self.world.q.tolist(),
                               velocity=self.world.velocities().tolist())
        msg.header.stamp = self._stamp(self.t)
        self.joint_pub.publish(msg)

    def _loop(self) -> None:
        try:
            cameras = self._observation(self.t)
            self._publish(self.t, cameras)
            while not self._stop.is_set():
                if not self._acted.wait(self.resend_s):
                    self._publish(self.t, cameras)      # the same O(t) again: fresh for the node
                    continue
                self._advance()
                self._acted.clear()                    # chunks from now on must be stamped at the new t
                cameras = self._observation(self.t)
                self._publish(self.t, cameras)
        except Exception as e:  # noqa: BLE001 - a render or physics error must be seen
            self.node.get_logger().error(f"sim lockstep stopped: {type(e).__name__}: {e}")
        finally:
            self.world.close()

    def _advance(self) -> None:
        """The physics from t to t + period, following the executed chunk."""
        steps = max(1, round(self.period_s / self._substep))
        dt = self.period_s / steps
        start = self.t
        for k in range(1, steps + 1):
            t = start + k * dt
            with self._lock:
                self.world.command(self.executor.sample(t)[0])
                self.world.step(dt)
            self.t = t if k < steps else start + self.period_s
            if self._tf_every and self.tf_pub is not None and k % self._tf_every == 0 and k < steps:
                self._publish_tf(self.t)
        self.cycles += 1

    def close(self) -> None:
        self._stop.set()
        self._acted.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self.world.close()
