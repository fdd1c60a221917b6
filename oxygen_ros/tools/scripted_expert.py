"""A scripted pick-and-place expert for the MuJoCo Panda scene (ROS-free): it picks up the
red cube and puts it in the bowl, wherever a seed put them (panda_scene.layout).

As ACT's scripted experts do, it plans the whole episode from the objects' initial poses
(privileged: the sim's ground truth) as a path of the gripper frame (the fingertips' centre,
pointing down; unturned until it is over the cube, then turned to the cube's faces) through
the phases PHASES, and turns it into
joint targets by damped least-squares IK on MuJoCo's Jacobian (warm-started point after
point). The targets are in the node's joint format (the Panda's 7 joint angles in rad,
then the finger width in m) at the node's action rate; `rollout` executes them as the node
and the sim would: every frame a chunk of the next targets (node/chunk_plan.plan_chunk,
stamped at the frame's observation) goes to the joint_trajectory_controller-like executor
(tools/trajectory_executor.py), sampled at 100 Hz into the position actuators.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import cube_place, panda_scene as ps

ACTION_RATE_HZ = 10.0      # the trained profile's action rate: one target every 100 ms
CHUNK_POINTS = 10          # targets per chunk: 1 s ahead
CONTROL_HZ = 100.0         # the sim's controller update (tools/sim_robot.py)
SETTLE_S = 1.0             # after the plan: the cube comes to rest before the episode ends

OPEN, CLOSED = ps.GRIPPER_MAX, 0.0
GRASP_Z = ps.CUBE_REST_Z + 0.012     # fingertips' centre: the pads around the cube, their tips clear of the table
CARRY_Z = ps.TABLE_TOP + 0.20
DROP_Z = ps.TABLE_TOP + 0.11         # cube's bottom 6 cm over the table, 2 cm over the rim
# (phase, seconds): where the gripper goes in each, see _waypoints
# The wrist turns to the cube's faces only once over the cube (align): the approach then depends
# on where the cube is alone, which both cameras show from afar, and its turn is read from the
# wrist camera's close view (turning on the way made the first second of every episode hinge
# on the cube's yaw, a few pixels in the front camera).
PHASES = (("pre_grasp", 2.0), ("align", 0.8), ("descend", 1.2), ("close", 1.0), ("lift", 1.0), ("carry", 2.0),
          ("lower", 0.6), ("release", 0.6), ("retreat", 0.8))
PHASE_NAMES = tuple(p for p, _ in PHASES) + ("done",)


@dataclass
class Plan:
    targets: np.ndarray        # [T, 8] joint targets, one every 1 / rate_hz s (target 0 at t = 0)
    phases: list               # [T] the phase each target belongs to
    rate_hz: float
    ik_error_max: float        # worst position error of the IK over the plan (m)


@dataclass
class Perturbation:
    """DART-style noise for demonstrations (Laskey et al. 2017): now and then the executed
    chunk is offset on the 7 arm joints for a few frames while the recorded chunk stays the
    plan's, so the data holds states off the expert's path labelled with the way back. Only
    in `phases` (by default the free-space moves; a slip near the cube costs the grasp).
    `confine`: an offset also ends when its phases do, so small ones in ("align", "descend")
    leave the gripper off the cube as a policy's errors do, with the grasp itself clean."""
    rng: np.random.Generator
    sigma_rad: float = 0.06           # offset per joint, normal
    chance: float = 0.12              # per frame, of starting an offset when none is active
    hold_frames: int = 5              # frames an offset is held (0.5 s at 10 Hz)
    phases: tuple = ("pre_grasp", "lift", "carry", "retreat")
    confine: bool = False
    _offset: np.ndarray = field(default=None, init=False, repr=False)
    _left: int = field(default=0, init=False, repr=False)

    def offset(self, phase: str) -> np.ndarray:
        """The offset for this frame's executed chunk ([8], zero on the finger width)."""
        if self.confine and phase not in self.phases:
            self._left = 0
        if self._left == 0 and phase in self.phases and self.rng.random() < self.chance:
            self._offset = np.append(self.rng.normal(0.0, self.sigma_rad, 7), 0.0)
            self._left = self.hold_frames
        if self._left == 0:
            return np.zeros(8)
        self._left -= 1
        return self._offset


@dataclass
class Episode:
    seed: int | None
    success: bool
    final_place: str
    places: list = field(default_factory=list)    # per frame
    grasped: bool = False                          # grasp contact at some frame
    duration_s: float = 0.0


def _rz(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class IK:
    """Damped least squares on the TCP site's Jacobian, for a target of the gripper frame
    (the fingertips' centre, whose offset from the TCP is fixed in the TCP's frame)."""

    def __init__(self, model, damping: float = 0.05, nullspace_gain: float = 0.05):
        import mujoco

        self.mj, self.model = mujoco, model
        self.data = mujoco.MjData(model)
        self.damping, self.nullspace_gain = damping, nullspace_gain
        self.site = model.site(ps.TCP_SITE).id
        self.qadr = np.array([model.joint(n).qposadr[0] for n in ps.KITCHEN_ARM_JOINTS])
        self.dadr = np.array([model.joint(n).dofadr[0] for n in ps.KITCHEN_ARM_JOINTS])
        self.fadr = np.array([model.joint(n).qposadr[0] for n in ps.KITCHEN_FINGER_JOINTS])
        self.lo = ps.real_to_kitchen(ps.ARM_LOWER) + 0.01
        self.hi = ps.real_to_kitchen(ps.ARM_UPPER) - 0.01
        fingers = {model.body(b).id for b in ps.FINGER_BODIES}
        self.pads = [g for g in range(model.ngeom) if model.geom_bodyid[g] in fingers
                     and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE]
        self.rest = ps.real_to_kitchen(ps.READY[:7])     # the posture the null space leans to
        self.forward(self.rest)
        rot = self.rotation()
        self.offset = rot.T @ (self.data.geom_xpos[self.pads].mean(axis=0) - self.data.site_xpos[self.site])
        self.down = rot          # READY: pointing down, fingers closing along world y

    def forward(self, q_kitchen) -> None:
        self.data.qpos[self.qadr] = q_kitchen
        self.data.qpos[self.fadr] = ps.width_to_fingers(OPEN)
        self.mj.mj_kinematics(self.model, self.data)
        self.mj.mj_comPos(self.model, self.data)

    def rotation(self) -> np.ndarray:
        return self.data.site_xmat[self.site].reshape(3, 3).copy()

    def solve(self, grip_pos, yaw: float, q0_kitchen, iterations: int = 200, tol: float = 2e-4):
        """(kitchen joint angles [7], position error m) putting the gripper frame at grip_pos,
        pointing down, turned by yaw about z from READY's turn."""
        target_rot = _rz(yaw) @ self.down
        target_tcp = np.asarray(grip_pos, float) - target_rot @ self.offset
        q = np.array(q0_kitchen, dtype=float)
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        for _ in range(iterations):
            self.forward(q)
            rot = self.rotation()
            err_p = target_tcp - self.data.site_xpos[self.site]
            err_r = 0.5 * sum(np.cross(rot[:, i], target_rot[:, i]) for i in range(3))
            if np.linalg.norm(err_p) < tol and np.linalg.norm(err_r) < 10 * tol:
                break
            self.mj.mj_jacSite(self.model, self.data, jacp, jacr, self.site)
            J = np.vstack([jacp[:, self.dadr], jacr[:, self.dadr]])
            e = np.concatenate([err_p, err_r])
            JJt = J @ J.T + self.damping ** 2 * np.eye(6)
            dq = J.T @ np.linalg.solve(JJt, e)
            # lean toward the rest posture where it moves the gripper not at all
            null = np.eye(7) - J.T @ np.linalg.solve(JJt, J)
            dq += null @ (self.nullspace_gain * (self.rest - q))
            q = np.clip(q + dq, self.lo, self.hi)
        self.forward(q)
        return q, float(np.linalg.norm(target_tcp - self.data.site_xpos[self.site]))


def start_pose(model, offset_xyz) -> np.ndarray:
    """A start away from READY (real units [8], fingers open): the gripper moved by
    `offset_xyz` (m, world frame) from READY's, still pointing down and unturned, so the plan
    from it starts at rest like one from READY. Demonstrations from such starts hold states
    where only the image tells where the cube is (from READY the first move already says)."""
    ik = IK(model)
    ik.forward(ik.rest)
    goal = ik.data.geom_xpos[ik.pads].mean(axis=0) + np.asarray(offset_xyz, float)
    q, _ = ik.solve(goal, 0.0, ik.rest)
    return np.append(ps.kitchen_to_real(q), ps.READY[7])


def _waypoints(layout: ps.Layout, start):
    """[(phase, seconds, gripper position, yaw, width)]: each phase's end pose."""
    cx, cy = layout.cube_xy
    bx, by = layout.bowl_xy
    yaw = layout.cube_yaw
    above = ps.CUBE_REST_Z + 0.10
    return [("pre_grasp", (cx, cy, above), 0.0, OPEN), ("align", (cx, cy, above), yaw, OPEN),
            ("descend", (cx, cy, GRASP_Z), yaw, OPEN),
            ("close", (cx, cy, GRASP_Z), yaw, CLOSED), ("lift", (cx, cy, CARRY_Z), yaw, CLOSED),
            ("carry", (bx, by, CARRY_Z), yaw, CLOSED), ("lower", (bx, by, DROP_Z), yaw, CLOSED),
            ("release", (bx, by, DROP_Z), yaw, OPEN), ("retreat", (bx, by, DROP_Z + 0.14), yaw, OPEN)]


def plan(model, layout: ps.Layout, rate_hz: float = ACTION_RATE_HZ, start=ps.READY) -> Plan:
    """The episode's joint targets from `start` (real units [8]) for the cube and bowl of
    `layout`, on `model` (a PandaWorld's: kinematics only, its state untouched)."""
    ik = IK(model)
    q = ps.real_to_kitchen(np.asarray(start, float)[:7])
    ik.forward(q)
    pos = ik.data.geom_xpos[ik.pads].mean(axis=0)
    yaw, width = 0.0, float(start[7])
    targets, phases, worst = [np.asarray(start, float).copy()], [PHASES[0][0]], 0.0
    durations = dict(PHASES)
    for phase, end_pos, end_yaw, end_width in _waypoints(layout, start):
        n = max(1, int(round(durations[phase] * rate_hz)))
        for k in range(1, n + 1):
            s = k / n
            s = s * s * (3 - 2 * s)          # smoothstep: each phase starts and ends at rest
            p = (1 - s) * np.asarray(pos) + s * np.asarray(end_pos)
            q, err = ik.solve(p, (1 - s) * yaw + s * end_yaw, q)
            worst = max(worst, err)
            targets.append(np.append(ps.kitchen_to_real(q), (1 - s) * width + s * end_width))
            phases.append(phase)
        pos, yaw, width = end_pos, end_yaw, end_width
    # inside the limits, as the node clips what it publishes (interpolation may overshoot by 1 ulp)
    return Plan(np.clip(np.array(targets), ps.LOWER, ps.UPPER), phases, rate_hz, worst)


def chunk_at(p: Plan, step: int, points: int = CHUNK_POINTS) -> np.ndarray:
    """The chunk of frame `step`: targets step .. step + points - 1, the last one held past
    the plan's end: [points, 8]."""
    idx = np.minimum(np.arange(step, step + points), len(p.targets) - 1)
    return p.targets[idx]


def rollout(world, seed: int | None = None, rate_hz: float = ACTION_RATE_HZ, on_frame=None,
            with_velocities: bool = True, perturb: Perturbation | None = None) -> Episode:
    """Run one episode on `world` (a PandaWorld; placed by `seed` if given, else as it is):
    one frame per target, each sending the chunk from that target on. `on_frame(step, t,
    chunk, phase)` is called at each frame's observation, before its chunk goes out (the
    world as observed; `chunk` is the plan's even when `perturb` offsets what is executed).
    Returns the episode scored by the place rule."""
    from ..node.chunk_plan import plan_chunk
    from .trajectory_executor import TrajectoryExecutor

    if seed is not None:
        world.set_layout(ps.layout(seed))
    p = plan(world.model, world.layout, rate_hz, world.q)
    executor = TrajectoryExecutor(world.names, world.q)
    dt, tick = 1.0 / rate_hz, 1.0 / CONTROL_HZ
    steps = len(p.targets) + int(round(SETTLE_S * rate_hz))
    places, grasped, t = [], False, 0.0
    for step in range(steps):
        t = step * dt
        chunk = chunk_at(p, step)
        phase = p.phases[step] if step < len(p.phases) else "done"
        if on_frame is not None:
            on_frame(step, t, chunk, phase)
        f = world.frames()
        places.append(cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0]))
        grasped |= world.grasp_contact()
        if perturb is not None:
            chunk = np.clip(chunk + perturb.offset(phase), ps.LOWER, ps.UPPER)
        c = plan_chunk(chunk, t, dt, now_s=t, with_velocities=with_velocities)
        executor.receive(world.names, c.stamp_s, c.times, c.positions,
                         None if c.velocities is None else c.velocities, now=t)
        for k in range(int(round(dt / tick))):
            world.command(executor.sample(t + (k + 1) * tick)[0])
            world.step(tick)
    f = world.frames()
    places.append(cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0]))
    return Episode(seed, cube_place.success(places), places[-1], places, grasped, t + dt)
