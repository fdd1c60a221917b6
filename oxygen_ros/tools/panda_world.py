"""A simulated Franka Panda on a table (MuJoCo), the world `oxygen sim` runs (ROS-free).

`PandaWorld`'s interface (what tools/sim_robot.py uses; test/fake_world.py fakes it):
`names`, `q`, `lower`, `upper`, `command(positions)`, `step(dt)`, `snapshot()`,
`render(view, size, state)`,
`velocities()`, `cube_position()`, `close()`, all in real Panda units (7 arm
joint angles in rad, then the finger width in m; see tools/panda_scene.py for the joint
conventions and the mapping onto the Kitchen model). Commands are position targets for
the model's position actuators; `step` advances the physics at 500 Hz.
The sim's ground truth (what `oxygen sim` publishes on /tf, tools/cube_place.py scores):
`frames()` (the cube's, the bowl's and the gripper's poses), `grasp_contact()`;
`set_layout()` places the cube and the bowl (panda_scene.layout(seed)).

Rendering is offscreen through EGL (Mesa's CPU renderer works without a display): the
MUJOCO_GL choice has to be made before mujoco is first imported, so it is made here.
"""
from __future__ import annotations

import os

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

GL_HELP = ("MuJoCo could not create an offscreen OpenGL context (MUJOCO_GL={gl}): {err}. "
           "With MUJOCO_GL=egl (the default set by oxygen_ros) install the Debian packages "
           "libegl1 libegl-mesa0 libgl1-mesa-dri; or set MUJOCO_GL=osmesa with libosmesa6, "
           "or MUJOCO_GL=glfw with a display.")

try:
    import mujoco  # after MUJOCO_GL: the GL backend is loaded on import
except ModuleNotFoundError:
    raise
except Exception as err:   # the backend's GL library is missing
    raise RuntimeError(GL_HELP.format(gl=os.environ.get("MUJOCO_GL"), err=err)) from err

from oxygen_ros.tools import panda_scene as ps  # noqa: E402


class PandaWorld:
    def __init__(self, names=None, lower=None, upper=None, layout: ps.Layout | None = None):
        """names: 8 labels, in order the 7 arm joints and the finger width (default
        panda_scene.JOINT_NAMES); lower/upper: the limits commands are clipped to, kept
        inside the real arm's (default: the real arm's); layout: where the cube and the
        bowl stand (default panda_scene.DEFAULT_LAYOUT; panda_scene.layout(seed))."""
        self.names = list(ps.JOINT_NAMES if names is None else names)
        lower = ps.LOWER if lower is None else np.asarray(lower, dtype=float)
        upper = ps.UPPER if upper is None else np.asarray(upper, dtype=float)
        if not len(self.names) == len(lower) == len(upper) == len(ps.JOINT_NAMES):
            raise ValueError(f"PandaWorld takes {len(ps.JOINT_NAMES)} joints: 7 arm joints, "
                             "then the finger width")
        self.lower = np.maximum(lower, ps.LOWER)
        self.upper = np.minimum(upper, ps.UPPER)
        if np.any(self.upper <= self.lower):
            raise ValueError("every upper limit must be above its lower limit (within the Panda's)")

        self.model = ps.build_spec().compile()
        self.data = mujoco.MjData(self.model)
        self._arm_q = np.array([self.model.joint(n).qposadr[0] for n in ps.KITCHEN_ARM_JOINTS])
        self._arm_v = np.array([self.model.joint(n).dofadr[0] for n in ps.KITCHEN_ARM_JOINTS])
        self._finger_q = np.array([self.model.joint(n).qposadr[0] for n in ps.KITCHEN_FINGER_JOINTS])
        self._finger_v = np.array([self.model.joint(n).dofadr[0] for n in ps.KITCHEN_FINGER_JOINTS])
        self._ctrl = np.array([self.model.actuator(n).id for n in ps.KITCHEN_ACTUATORS])
        self._cube = self.model.body("cube").id
        self._cube_q = self.model.joint("cube").qposadr[0]
        self._cube_v = self.model.joint("cube").dofadr[0]
        self._bowl = self.model.body("bowl").id
        self._tcp = self.model.site(ps.TCP_SITE).id
        # the fingertips' centre: the mean of the finger pads (each finger's capsules)
        fingers = {self.model.body(b).id for b in ps.FINGER_BODIES}
        self._pads = np.array([g for g in range(self.model.ngeom) if self.model.geom_bodyid[g] in fingers
                               and self.model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE])
        self._finger_geoms = [np.flatnonzero(self.model.geom_bodyid == self.model.body(b).id)
                              for b in ps.FINGER_BODIES]
        self._cube_geoms = np.flatnonzero(self.model.geom_bodyid == self._cube)
        self._pending = 0.0                 # simulated time asked for but not stepped yet

        # start at rest in the ready pose (gripper down, open), holding it
        self.set_joints(ps.READY)
        self.set_layout(layout or ps.DEFAULT_LAYOUT)

        # what the cameras draw: no collision geoms (group 3), no sites
        self._option = mujoco.MjvOption()
        self._option.geomgroup[3] = 0
        self._option.sitegroup[:] = 0
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._view_data = None              # render(state=...)'s MjData

    # -- joints --------------------------------------------------------------------------
    @property
    def q(self) -> np.ndarray:
        """Measured positions [8]: 7 real Panda joint angles, then the finger width."""
        arm = ps.kitchen_to_real(self.data.qpos[self._arm_q])
        return np.append(arm, ps.fingers_to_width(self.data.qpos[self._finger_q]))

    def set_joints(self, positions) -> None:
        """Put the arm at rest at `positions` (real units [8], clipped to the limits), holding it."""
        start = np.clip(np.asarray(positions, dtype=float), self.lower, self.upper)
        self.data.qpos[self._arm_q] = ps.real_to_kitchen(start[:7])
        self.data.qpos[self._finger_q] = ps.width_to_fingers(start[7])
        self.data.qvel[self._arm_v] = 0.0
        self.data.qvel[self._finger_v] = 0.0
        self.command(start)
        mujoco.mj_forward(self.model, self.data)

    def velocities(self) -> np.ndarray:
        """Measured velocities [8]: rad/s of the arm joints, then m/s of the finger width."""
        return np.append(self.data.qvel[self._arm_v], self.data.qvel[self._finger_v].sum())

    def command(self, positions) -> None:
        """Position targets [8] in real units, clipped to the limits."""
        target = np.clip(np.asarray(positions, dtype=float).reshape(len(self.names)),
                         self.lower, self.upper)
        self.commanded = target
        self.data.ctrl[self._ctrl] = np.append(ps.real_to_kitchen(target[:7]),
                                               ps.width_to_fingers(target[7]))

    def step(self, dt: float) -> None:
        """Advance the physics by dt seconds, in whole 2 ms steps (the rest carries over)."""
        self._pending += dt
        n = int(self._pending / self.model.opt.timestep + 1e-6)
        if n > 0:
            mujoco.mj_step(self.model, self.data, nstep=n)
            self._pending -= n * self.model.opt.timestep

    @property
    def time(self) -> float:
        return float(self.data.time)

    def cube_position(self) -> np.ndarray:
        """The cube's centre [x, y, z] in the world frame (m); the table top is at panda_scene.TABLE_TOP."""
        return self.data.xpos[self._cube].copy()

    # -- the task's ground truth ------------------------------------------------------
    def set_layout(self, layout: ps.Layout) -> None:
        """Put the cube (at rest on the table, turned by cube_yaw) and the bowl where the
        layout says."""
        self.model.body_pos[self._bowl] = (*layout.bowl_xy, ps.TABLE_TOP)   # a static body: moved in the model
        self.put_cube((*layout.cube_xy, ps.CUBE_REST_Z), layout.cube_yaw)
        self.layout = layout

    def put_cube(self, position, yaw: float = 0.0) -> None:
        """Put the cube's centre at `position` [x, y, z] (world frame, m), at rest and turned by
        `yaw`; for frames no episode shows (the cube in the bowl while the arm reaches)."""
        half = yaw / 2
        self.data.qpos[self._cube_q:self._cube_q + 7] = (*position, np.cos(half), 0.0, 0.0, np.sin(half))
        self.data.qvel[self._cube_v:self._cube_v + 6] = 0.0
        mujoco.mj_forward(self.model, self.data)

    def gripper_position(self) -> np.ndarray:
        """The fingertips' centre [x, y, z] (world frame, m)."""
        return self.data.geom_xpos[self._pads].mean(axis=0)

    def frames(self) -> dict:
        """{"cube", "bowl", "gripper": (position [3], quaternion [w, x, y, z])} in the world
        frame: the cube's centre, the bowl's centre on the table top, the fingertips'
        centre turned as the TCP (its z axis the approach direction)."""
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self._tcp])
        return {"cube": (self.data.xpos[self._cube].copy(), self.data.xquat[self._cube].copy()),
                "bowl": (self.data.xpos[self._bowl].copy(), self.data.xquat[self._bowl].copy()),
                "gripper": (self.gripper_position(), quat)}

    def grasp_contact(self) -> bool:
        """Whether the cube touches both fingers (a grasp)."""
        touching = [False, False]
        for c in self.data.contact[:self.data.ncon]:
            pair = (c.geom1, c.geom2)
            other = pair[1] if pair[0] in self._cube_geoms else pair[0] if pair[1] in self._cube_geoms else None
            if other is not None:
                for i, geoms in enumerate(self._finger_geoms):
                    touching[i] |= bool(other in geoms)
        return all(touching)

    # -- rendering -----------------------------------------------------------------------
    def snapshot(self) -> np.ndarray:
        """What a camera needs of the current state (the positions), to render it later
        (another thread, while the physics runs on)."""
        return self.data.qpos.copy()

    def render(self, view: str = "base", size: int = 160, state: np.ndarray | None = None) -> np.ndarray:
        """An RGB uint8 image [size, size, 3]: "base" the scene camera, "left_wrist" the
        wrist camera, "right_wrist" the side view; of `state` (a snapshot()) if given, else
        of the live state. Renderers belong to the thread that first renders a size: render
        and close() from that thread."""
        camera = ps.CAMERAS[view]
        renderer = self._renderer(size, size)
        data = self.data
        if state is not None:       # the snapshot's poses, on a private MjData
            if self._view_data is None:
                self._view_data = mujoco.MjData(self.model)
            data = self._view_data
            data.qpos[:] = state
            mujoco.mj_kinematics(self.model, data)
            mujoco.mj_camlight(self.model, data)
        renderer.update_scene(data, camera=camera, scene_option=self._option)
        return renderer.render().copy()

    def _renderer(self, height: int, width: int) -> "mujoco.Renderer":
        key = (height, width)
        if key not in self._renderers:
            try:
                renderer = mujoco.Renderer(self.model, height, width)
            except Exception as err:   # no GL library, or no display for glfw
                raise RuntimeError(GL_HELP.format(gl=os.environ.get("MUJOCO_GL"), err=err)) from err
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
            self._renderers[key] = renderer
        return self._renderers[key]

    def close(self) -> None:
        """Close the renderers now: an EGL context left to the garbage collector at exit raises."""
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
