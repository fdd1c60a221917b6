"""How the arm actually moved under the chunks: tracking error, and what each trajectory
switch did to the measured joints next to what it did to the command (ROS-free, numpy).

The command is the controller-like executor's (tools/trajectory_executor.py) replaying
the trajectories at the times they arrived; the measurement is joint states (a bag's
/joint_states, or a simulator read directly), sampled on one time grid. At every switch
at time s, with w = WINDOW_S, each signal (commanded, actual) is scored the same way, so
the two are comparable:
  velocity change  = max over joints |mean v over (s, s+w] - mean v over [s-w, s)|   (rad/s)
  course deviation = max over joints |q(s+w) - q(s) - w * mean v over [s-w, s)|      (rad)
i.e. how much the switch changed the speed, and how far it pulled the joint off the course
it was on. A physical arm low-pass filters a commanded jump, so actual figures are smaller
and later than the commanded ones; the window is long enough (10 states at 100 Hz) for the
arm to answer. Velocities missing from the joint states are taken by finite differences.
The tracking error is |command(t) - measurement(t)| at every joint state.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .trajectory_executor import TrajectoryExecutor, TrajectoryRejected

WINDOW_S = 0.1


def commanded(trajectories, names, initial, times) -> tuple[np.ndarray, np.ndarray, list]:
    """The executor's command at each of `times` (sorted, s) for joints `names`, the
    trajectories (received s, names, stamp s, times_from_start, positions, velocities |
    None; as RunData.trajectories) taking effect when they were received. Returns
    (q [N, J], v [N, J], the times each trajectory was accepted)."""
    executor = TrajectoryExecutor(names, initial)
    q = np.empty((len(times), len(names)))
    v = np.empty_like(q)
    pending = iter(sorted(trajectories, key=lambda m: m[0]))
    message = next(pending, None)
    accepted = []
    for i, t in enumerate(times):
        while message is not None and message[0] <= t:
            received, msg_names, stamp, tfs, positions, velocities = message
            try:
                executor.receive(msg_names, stamp, tfs, positions, velocities, now=received)
                accepted.append(received)
            except TrajectoryRejected:
                pass                            # the summary counts rejections elsewhere
            message = next(pending, None)
        q[i], v[i] = executor.sample(float(t))
    return q, v, accepted


def switch_scores(t, q, v, switches, window_s: float = WINDOW_S) -> list[tuple[float, float, float]]:
    """(switch time, velocity change, course deviation) for each switch with a full window
    of samples on both sides (t [N] sorted, q/v [N, J])."""
    out = []
    for s in switches:
        before = (t >= s - window_s) & (t < s)
        after = (t > s) & (t <= s + window_s)
        if not before.any() or not after.any() or s + window_s > t[-1]:
            continue
        v_before, v_after = v[before].mean(axis=0), v[after].mean(axis=0)
        q_s = np.array([np.interp(s, t, q[:, j]) for j in range(q.shape[1])])
        q_w = np.array([np.interp(s + window_s, t, q[:, j]) for j in range(q.shape[1])])
        out.append((float(s), float(np.max(np.abs(v_after - v_before))),
                    float(np.max(np.abs(q_w - q_s - window_s * v_before)))))
    return out


def finite_difference(t, q) -> np.ndarray:
    return np.gradient(q, t, axis=0) if len(t) > 1 else np.zeros_like(q)


def score_stats(scores) -> dict:
    """count, max and p95 of the velocity changes and course deviations."""
    if not scores:
        return {"count": 0, "velocity_change_max": 0.0, "velocity_change_p95": 0.0,
                "course_deviation_max": 0.0, "course_deviation_p95": 0.0}
    dv = np.array([s[1] for s in scores])
    dq = np.array([s[2] for s in scores])
    return {"count": len(scores), "velocity_change_max": float(dv.max()),
            "velocity_change_p95": float(np.percentile(dv, 95)),
            "course_deviation_max": float(dq.max()), "course_deviation_p95": float(np.percentile(dq, 95))}


@dataclass
class ArmTrack:
    """A run's joints on one time grid (the joint states'): measured and commanded."""
    names: list
    t: np.ndarray             # [N] s
    q: np.ndarray             # [N, J] measured
    v: np.ndarray
    q_cmd: np.ndarray         # [N, J] the executor's command
    v_cmd: np.ndarray
    accepted: list            # when each trajectory took over (s); switches: all but the first
    velocities: str           # "measured" | "finite differences"

    def scores(self, which: str) -> list[tuple[float, float, float]]:
        """switch_scores of the "actual" or the "commanded" joints."""
        q, v = (self.q, self.v) if which == "actual" else (self.q_cmd, self.v_cmd)
        return switch_scores(self.t, q, v, self.accepted[1:])

    def summary(self) -> dict:
        active = self.t >= (self.accepted[0] if self.accepted else np.inf)   # once commanded
        error = np.abs(self.q_cmd[active] - self.q[active])

        def rms(e):
            return float(np.sqrt(np.mean(e ** 2))) if e.size else None
        return {
            "joint_states": len(self.t),
            "velocities": self.velocities,
            "tracking_error": {"rms": rms(error), "max": float(error.max()) if error.size else None,
                               "per_joint_rms": {n: rms(error[:, j]) for j, n in enumerate(self.names)}},
            "switches": {which: score_stats(self.scores(which)) for which in ("commanded", "actual")},
            "window_s": WINDOW_S,
        }


def track(trajectories, states) -> ArmTrack | None:
    """The ArmTrack of a run. trajectories as RunData.trajectories; states: joint states
    (stamp s, names, positions, velocities) in any order. None without trajectories or
    with fewer than two states naming every trajectory joint."""
    if not trajectories:
        return None
    names = list(trajectories[0][1])
    rows = [s for s in sorted(states, key=lambda s: s[0]) if set(names) <= set(s[1])]
    if len(rows) < 2:
        return None
    t = np.array([s[0] for s in rows])
    index = [[list(s[1]).index(n) for n in names] for s in rows]
    q = np.array([[s[2][i] for i in ix] for s, ix in zip(rows, index)])
    measured = all(len(s[3]) == len(s[2]) for s in rows)
    v = (np.array([[s[3][i] for i in ix] for s, ix in zip(rows, index)]) if measured
         else finite_difference(t, q))
    # before the first trajectory the controller holds where the arm was
    q_cmd, v_cmd, accepted = commanded(trajectories, names, q[0], t)
    return ArmTrack(names, t, q, v, q_cmd, v_cmd, accepted,
                    "measured" if measured else "finite differences")
