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

A fleet (one node, a sim per robot) runs on one sim clock, so its sims keep step: each sim
reports the sim time it has reached on `lockstep_time` (rosgraph_msgs/Clock in its
namespace, reliable, transient local); the sim that publishes /clock waits until every peer
(`peers`: their namespaces) has reached t + period before it moves /clock there, and a sim
without the clock (`publish_clock=False`) publishes O(t) only once /clock has reached t.
Without that, the first robot's clock ran ahead of a robot whose chunk came a frame later:
the node re-stamped that chunk (the clock moved while it was computed), the sim ignored it,
its observation went stale on the shared clock and it never got another chunk.
"""
from __future__ import annotations

import threading
import time

from .sim_robot import SimRobot

START_S = 1.0
STAMP_TOLERANCE_S = 1e-6


class LockstepSim(SimRobot):
    def __init__(self, node, params: dict, period_s: float, publish_clock: bool = True,
                 resend_s: float = 0.25, tf_hz: float = 20.0, control_hz: float = 100.0,
                 peers: tuple = (), **kw):
        if not period_s > 0:
            raise ValueError(f"lock-step period must be positive, got {period_s}")
        self.t = START_S
        super().__init__(node, params, control_hz=control_hz, tf_hz=tf_hz, paced=False, **kw)
        self.period_s, self.resend_s = period_s, resend_s
        self._substep = 1.0 / control_hz
        self._tf_every = max(1, round(control_hz / tf_hz)) if tf_hz > 0 else 0
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from rosgraph_msgs.msg import Clock

        if peers and not publish_clock:
            raise ValueError("lock-step peers are waited for by the sim that publishes /clock")
        self._Clock = Clock
        self.clock_pub = None
        self._progress = threading.Condition()       # peers' reached times / the fleet's clock, in ns
        self._peer_ns = {}
        self._clock_ns = 0
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.reached_pub = node.create_publisher(Clock, "lockstep_time", latched)
        if publish_clock:
            self.clock_pub = node.create_publisher(Clock, "/clock", 10)    # absolute: one clock for a fleet
            for ns in peers:
                self._peer_ns[ns] = 0
                node.create_subscription(Clock, f"{ns.rstrip('/')}/lockstep_time",
                                         lambda m, ns=ns: self._on_progress(ns, m), latched)
        else:
            node.create_subscription(Clock, "/clock", lambda m: self._on_progress(None, m), 10)
        self.peer_waits = 0      # times the clock waited for a peer (fleet)
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

    def _on_progress(self, peer, msg) -> None:
        t_ns = msg.clock.sec * 1_000_000_000 + msg.clock.nanosec
        with self._progress:
            if peer is None:
                self._clock_ns = max(self._clock_ns, t_ns)
            else:
                self._peer_ns[peer] = max(self._peer_ns[peer], t_ns)
            self._progress.notify_all()

    def _keep_step(self, t: float) -> None:
        """Before O(t) goes out in a fleet: say this sim reached t; the clock's sim waits for
        every peer to reach t, any other sim for /clock to reach t."""
        t_ns = int(round(t * 1e9))
        self.reached_pub.publish(self._Clock(clock=self._stamp(t)))
        if self.clock_pub is not None:
            ready = lambda: all(v >= t_ns for v in self._peer_ns.values())   # noqa: E731
        else:
            ready = lambda: self._clock_ns >= t_ns                           # noqa: E731
        waited = False
        with self._progress:
            while not ready() and not self._stop.is_set():
                waited = True
                self._progress.wait(0.1)
        if waited and self.clock_pub is not None:
            self.peer_waits += 1
        if self.clock_pub is None:
            time.sleep(0.002)        # the node gets /clock before this sim's inputs, as from the clock's sim

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
            self._keep_step(self.t)
            self._publish(self.t, cameras)
            while not self._stop.is_set():
                if not self._acted.wait(self.resend_s):
                    self._publish(self.t, cameras)      # the same O(t) again: fresh for the node
                    continue
                self._advance()
                self._acted.clear()                    # chunks from now on must be stamped at the new t
                cameras = self._observation(self.t)      # rendered before the wait: the fleet's
                self._keep_step(self.t)                  # observations go out together
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
        with self._progress:
            self._progress.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self.world.close()
