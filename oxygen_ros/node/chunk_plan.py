"""An action chunk on the robot's time line (ROS-free).

Action i of a chunk predicted from an observation stamped t_obs is due at t_obs + i / rate,
where rate is the checkpoint's action rate (its training data's), not the replanning
rate. A joint_trajectory_controller (JTC) takes header.stamp as the trajectory's start
and each point's time_from_start from there, and skips what is already past; so the
trajectory is stamped t_obs, points keep their own times, and those already in the past
when the chunk is published are dropped (and counted) rather than sent for the controller
to skip: the controller then splines from where the arm is to the first point still ahead.

A point due less than MIN_LEAD_S ahead is dropped too: the controller cannot reach it
before its next update (100 Hz: 10 ms), and splining to it from where the arm is would
command distance / (a few ms), a velocity spike.

Velocities are optional (a parameter): with them the JTC interpolates cubically instead of
linearly (a velocity step at every point). They are finite differences of the positions,
the last one zero, because the JTC rejects a trajectory that ends moving unless told
otherwise (allow_nonzero_velocity_at_trajectory_end).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_LEAD_S = 0.01     # one update of a 100 Hz joint_trajectory_controller


def finite_difference_velocities(positions: np.ndarray, dt: float) -> np.ndarray:
    """[H, J] positions every dt seconds -> velocities: central differences inside, a
    forward one at the first point, zero at the last."""
    p = np.asarray(positions, np.float64)
    v = np.zeros_like(p)
    if len(p) > 2:
        v[1:-1] = (p[2:] - p[:-2]) / (2 * dt)
    if len(p) > 1:
        v[0] = (p[1] - p[0]) / dt
    return v


@dataclass
class PlannedChunk:
    stamp_s: float                 # header.stamp: the time of action 0 (the observation's)
    times: np.ndarray              # time_from_start of the points kept [N], strictly increasing
    positions: np.ndarray          # [N, J]
    velocities: np.ndarray | None  # [N, J] or None (positions-only trajectory)
    dropped: int                   # leading points already in the past at publish time

    @property
    def empty(self) -> bool:
        return len(self.times) == 0


def plan_chunk(positions, obs_stamp_s: float, action_dt: float, now_s: float,
               with_velocities: bool = False, min_lead_s: float = MIN_LEAD_S) -> PlannedChunk:
    """The points of a chunk [H, J] still at least `min_lead_s` ahead at `now_s`, on the
    chunk's own time base."""
    p = np.asarray(positions, np.float64)
    if not action_dt > 0:
        raise ValueError(f"action period must be positive, got {action_dt}")
    times = np.arange(len(p)) * action_dt
    keep = obs_stamp_s + times >= now_s + min_lead_s
    first = int(np.argmax(keep)) if keep.any() else len(p)
    vel = finite_difference_velocities(p, action_dt)[first:] if with_velocities else None
    return PlannedChunk(obs_stamp_s, times[first:], p[first:], vel, first)


@dataclass
class PublishedChunk:
    """A chunk as it was sent: what the robot executes until the next one replaces it."""
    stamp_s: float           # time of its action 0
    dt: float                # its action period
    positions: np.ndarray    # [H, J] robot units, the whole chunk (dropped points included)

    @property
    def end_s(self) -> float:
        return self.stamp_s + (len(self.positions) - 1) * self.dt

    def remainder(self, start_s: float, steps: int) -> np.ndarray:
        """This chunk at start_s + i * dt for the i < steps that still lie inside it,
        linearly interpolated: [n, J]; n = 0 when the chunk has ended by start_s."""
        t = start_s + np.arange(steps) * self.dt
        t = t[t <= self.end_s + 1e-9]
        x = np.clip((t - self.stamp_s) / self.dt, 0.0, len(self.positions) - 1)
        lo = np.floor(x).astype(int)
        hi = np.minimum(lo + 1, len(self.positions) - 1)
        a = (x - lo)[:, None]
        return (1 - a) * self.positions[lo] + a * self.positions[hi]
