"""What a Jazzy joint_trajectory_controller (JTC) commands from the trajectories it gets (ROS-free).

`TrajectoryExecutor.receive` checks a trajectory as JTC's validate_trajectory_msg does and,
if it passes, replaces the current one outright (Jazzy: no splicing). `sample(t)` is the
commanded state at t, as JTC's Trajectory::sample computes it:
- header stamp 0 means "start at receipt"; otherwise time_from_start counts from the stamp,
  and points already past are skipped (sampling lands in the segment containing t);
- before the first point, the command runs from the state before the trajectory (the
  commanded state at receipt, as with JTC's interpolate_from_desired_state) to that point;
- positions only: linear between points; with velocities: cubic Hermite (positions and
  velocities match at both ends of every segment);
- after the last point: its position, zero velocity.
Joints a partial goal does not name hold their commanded position at receipt.

Every replacement of a trajectory by another is recorded as a BoundaryJump (see there),
so a bag's trajectories can be scored with `replay` without a robot. Times are float
seconds on the ROS clock.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLOAT_EPS = float(np.finfo(np.float32).eps)   # JTC's zero for the last point's velocities


class TrajectoryRejected(ValueError):
    """The controller refuses the trajectory; the message is what it would log."""


@dataclass
class BoundaryJump:
    """What one replacement changes, at the receipt time `time` (old = the trajectory being
    replaced, new = the accepted one, both on all joints):

    position_jump = max over joints |new.positions[k] - old(t_k)| in rad, where point k
        is the new trajectory's first with t_k >= time (its last if none is), and old(t_k)
        what the old trajectory would have commanded at t_k: how far the new plan departs
        from the old one at the same instant. The command itself stays continuous while
        that point is ahead, since the new trajectory starts from the commanded state.
    velocity_jump = max over joints |new_velocity(time) - old_velocity(time)| in rad/s:
        the commanded velocities at the switch, the new one just after it.
    """
    time: float
    position_jump: float
    velocity_jump: float


class _Trajectory:
    """An accepted trajectory on all joints, with the state it starts from."""

    def __init__(self, t_before, q_before, v_before, times, positions, velocities, has_vel):
        self.t_before, self.q_before, self.v_before = t_before, q_before, v_before
        self.times = times              # [N] absolute, strictly increasing
        self.positions = positions      # [N, J]
        self.velocities = velocities    # [N, J] (zeros where a point has none)
        self.has_vel = has_vel          # [N] bool: the point came with velocities

    def sample(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        T, P, V = self.times, self.positions, self.velocities
        if t < T[0]:
            if t < self.t_before:            # before receipt: JTC commands nothing new
                return self.q_before.copy(), self.v_before.copy()
            return _interpolate(self.t_before, self.q_before, self.v_before, T[0], P[0], V[0],
                                bool(self.has_vel[0]), t)
        if t >= T[-1]:
            return P[-1].copy(), np.zeros_like(P[-1])
        k = int(np.searchsorted(T, t, side="right")) - 1
        return _interpolate(T[k], P[k], V[k], T[k + 1], P[k + 1], V[k + 1],
                            bool(self.has_vel[k] and self.has_vel[k + 1]), t)


def _interpolate(t0, q0, v0, t1, q1, v1, cubic: bool, t) -> tuple[np.ndarray, np.ndarray]:
    """Position and velocity at t in [t0, t1): linear, or the cubic through (q0, v0) and (q1, v1)."""
    d, s = t1 - t0, t - t0
    if not cubic:
        slope = (q1 - q0) / d
        return q0 + slope * s, slope
    c2 = (3.0 * (q1 - q0) - (2.0 * v0 + v1) * d) / d ** 2
    c3 = (2.0 * (q0 - q1) + (v0 + v1) * d) / d ** 3
    return q0 + v0 * s + c2 * s ** 2 + c3 * s ** 3, v0 + 2.0 * c2 * s + 3.0 * c3 * s ** 2


class TrajectoryExecutor:
    def __init__(self, joint_names, initial_positions, allow_partial_joints_goal: bool = False,
                 allow_nonzero_velocity_at_trajectory_end: bool = False):
        self.joint_names = list(joint_names)
        self.initial = np.asarray(initial_positions, dtype=float).reshape(len(self.joint_names))
        self.allow_partial_joints_goal = allow_partial_joints_goal
        self.allow_nonzero_velocity_at_trajectory_end = allow_nonzero_velocity_at_trajectory_end
        self.trajectory: _Trajectory | None = None
        self.jumps: list[BoundaryJump] = []

    def sample(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """(positions [J], velocities [J]) commanded at `now`."""
        if self.trajectory is None:
            return self.initial.copy(), np.zeros_like(self.initial)
        return self.trajectory.sample(now)

    def receive(self, names, stamp_s: float, times_from_start, positions, velocities=None,
                *, now: float) -> None:
        """Take a trajectory received at `now`, or raise TrajectoryRejected (keeping the
        current one). positions: one row per point, in `names` order; velocities: None or
        one row per point (an empty row: that point has none)."""
        names = list(names)
        times = [float(t) for t in times_from_start]
        self._validate(names, float(stamp_s), times, positions, velocities, now)
        q_now, v_now = self.sample(now)
        start = now if stamp_s == 0 else float(stamp_s)
        index = [self.joint_names.index(n) for n in names]
        n_points, n_joints = len(times), len(self.joint_names)
        full_p = np.tile(q_now, (n_points, 1))          # unnamed joints hold their command
        full_v = np.zeros((n_points, n_joints))
        has_vel = np.zeros(n_points, dtype=bool)
        for k in range(n_points):
            full_p[k, index] = positions[k]
            if velocities is not None and len(velocities[k]):
                full_v[k, index] = velocities[k]
                has_vel[k] = True
        new = _Trajectory(now, q_now, v_now, start + np.array(times), full_p, full_v, has_vel)
        if self.trajectory is not None:
            self.jumps.append(_jump(self.trajectory, new, now))
        self.trajectory = new

    def _validate(self, names, stamp_s, times, positions, velocities, now) -> None:
        """JTC's validate_trajectory_msg with its messages, in its order but for the last check
        (and the row counts, which a message's structure guarantees there)."""
        def reject(reason):
            raise TrajectoryRejected(reason)

        if not self.allow_partial_joints_goal and len(names) != len(self.joint_names):
            reject("Joints on incoming trajectory don't match the controller joints.")
        if not names:
            reject("Empty joint names on incoming trajectory.")
        if not times:
            reject("Empty trajectory received.")
        if stamp_s != 0 and stamp_s + times[-1] < now:
            reject(f"Received trajectory with non-zero start time ({stamp_s:f}) that ends in the "
                   f"past ({stamp_s + times[-1]:f})")
        for n in names:
            if n not in self.joint_names:
                reject(f"Incoming joint {n} doesn't match the controller's joints.")
        if len(positions) != len(times):
            reject(f"{len(positions)} position rows for {len(times)} points.")
        if velocities is not None and len(velocities) != len(times):
            reject(f"{len(velocities)} velocity rows for {len(times)} points.")
        for i, t in enumerate(times):
            if i > 0 and t <= times[i - 1]:
                reject(f"Time between points {i - 1} and {i} is not strictly increasing, it is "
                       f"{times[i - 1]:f} and {t:f} respectively")
            if len(positions[i]) != len(names):
                reject(f"Mismatch between joint_names size ({len(names)}) and positions "
                       f"({len(positions[i])}) at point #{i}.")
            if velocities is not None and len(velocities[i]) and len(velocities[i]) != len(names):
                reject(f"Mismatch between joint_names size ({len(names)}) and velocities "
                       f"({len(velocities[i])}) at point #{i}.")
        # JTC checks this before the sizes; here after them, so the names line up with the values
        if velocities is not None and not self.allow_nonzero_velocity_at_trajectory_end:
            for n, v in zip(names, velocities[-1]):
                if abs(v) > FLOAT_EPS:
                    reject(f"Velocity of last trajectory point of joint {n} is not zero: {v:.15f}")


def _jump(old: _Trajectory, new: _Trajectory, now: float) -> BoundaryJump:
    """The BoundaryJump of replacing `old` by `new` at `now` (defined on BoundaryJump)."""
    ahead = np.nonzero(new.times >= now)[0]
    k = int(ahead[0]) if len(ahead) else len(new.times) - 1
    position = np.max(np.abs(new.positions[k] - old.sample(float(new.times[k]))[0]))
    velocity = np.max(np.abs(new.sample(now)[1] - old.sample(now)[1]))
    return BoundaryJump(now, float(position), float(velocity))


def jump_stats(jumps) -> dict:
    """count, and max / 95th percentile of the position (rad) and velocity (rad/s) jumps."""
    if not jumps:
        return {"count": 0, "position_max": 0.0, "position_p95": 0.0, "velocity_max": 0.0,
                "velocity_p95": 0.0}
    p = np.array([j.position_jump for j in jumps])
    v = np.array([j.velocity_jump for j in jumps])
    return {"count": len(jumps), "position_max": float(p.max()), "position_p95": float(np.percentile(p, 95)),
            "velocity_max": float(v.max()), "velocity_p95": float(np.percentile(v, 95))}


def replay(messages, joint_names, initial_positions):
    """Run a fresh executor over recorded trajectories. messages: (receive_time_s, names,
    stamp_s, times_from_start, positions, velocities_or_None) in time order (a bag's log
    time as the receive time). Returns (jumps, rejection reasons). The command is a pure
    function of time, evaluated exactly at each receive time, so no controller updates
    need to run in between."""
    executor = TrajectoryExecutor(joint_names, initial_positions)
    rejections = []
    for received, names, stamp_s, times, positions, velocities in messages:
        try:
            executor.receive(names, stamp_s, times, positions, velocities, now=received)
        except TrajectoryRejected as e:
            rejections.append(str(e))
    return executor.jumps, rejections
