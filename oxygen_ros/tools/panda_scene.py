"""The MuJoCo scene of the simulated Franka Panda, and its joint conventions (ROS-free).

The arm is gymnasium-robotics' Franka Kitchen Panda: only its asset files (meshes, MJCF
includes) are used, found with importlib so that none of the package's environments is
imported (they fail with mujoco >= 3.12). Around it: a table, a red cube on a free joint,
a blue bowl, shadowless lights and three cameras: "scene" (fixed, over the table), "wrist"
(on link 7, looking along the gripper) and "right" (fixed side view).

Everything outside this file speaks REAL Panda units (franka_description's panda_joint1..7
and the finger width in metres). The Kitchen model's joints 6 and 7 have other zeros than
the real arm's: its link 6 and link 7 frames are turned about their joint axes by the
angles in KITCHEN_OFFSETS, so q_real = q_kitchen + KITCHEN_OFFSETS. That mapping lives here
and nowhere else.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import numpy as np

# The real Panda (franka_description / libfranka "control parameters" limits, rad).
ARM_JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
GRIPPER_JOINT = "panda_finger_width"          # distance between the fingers, metres
JOINT_NAMES = ARM_JOINTS + [GRIPPER_JOINT]
ARM_LOWER = np.array([-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973])
ARM_UPPER = np.array([2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973])
GRIPPER_MAX = 0.08
LOWER = np.append(ARM_LOWER, 0.0)
UPPER = np.append(ARM_UPPER, GRIPPER_MAX)
# gripper down over the table, fingers open: the classic franka "ready" pose
READY = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, GRIPPER_MAX])

# chain.xml turns link 6 by euler (1.57, 0, 1.57) where the real arm has (pi/2, 0, 0), and
# link 7 by (1.57, 0, 0.7854) where the real arm has (pi/2, 0, 0): the extra turns about z
# are joint offsets (the values as the model writes them, so the frames coincide exactly).
KITCHEN_OFFSETS = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.57, 0.7854])

# Names inside the Kitchen model.
KITCHEN_ARM_JOINTS = [f"robot:panda0_joint{i}" for i in range(1, 8)]
KITCHEN_FINGER_JOINTS = ["robot:panda0_finger_joint1", "robot:panda0_finger_joint2"]
KITCHEN_ACTUATORS = [f"panda0_joint{i}" for i in range(1, 8)] + ["r_gripper_finger_joint",
                                                                 "l_gripper_finger_joint"]
HAND_BODY = "panda0_link7"                    # carries the hand; its z axis points out of it
FINGER_BODIES = ("panda0_leftfinger", "panda0_rightfinger")
TCP_SITE = "end_effector"                     # where the real hand's TCP is, 0.21 m along link 7

TIMESTEP = 0.002                              # 500 Hz physics
TABLE_TOP = 0.40                              # z of the table top; the arm stands on it
CUBE_HALF = 0.025
CUBE_REST_Z = TABLE_TOP + CUBE_HALF           # the cube's centre when it rests on the table
CUBE_START = (0.50, 0.0)                      # x, y on the table, in front of the arm
BOWL_CENTER = (0.45, 0.25)
BOWL_RADIUS = 0.08                            # of the wall boxes' centres
BOWL_WALL = 0.004                             # half the wall's thickness
BOWL_INNER_RADIUS = BOWL_RADIUS - BOWL_WALL   # inside the wall, from the bowl's centre
BOWL_HEIGHT = 0.04                            # the rim, above the bowl's base (the table top)
# Where a seed puts the cube's and the bowl's centres (world x, y in m; the arm's base is
# at 0, 0): in front of the arm, inside its comfortable reach with the gripper pointing
# down, and in every camera's view; the two at least MIN_SEPARATION apart, so the cube
# never starts in or against the bowl and the fingers clear its wall.
WORKSPACE_X = (0.35, 0.60)
WORKSPACE_Y = (-0.25, 0.25)
MIN_SEPARATION = 0.18
CAMERAS = {"base": "scene", "left_wrist": "wrist", "right_wrist": "right"}   # view -> camera


def real_to_kitchen(q_real7) -> np.ndarray:
    """Kitchen model joint angles [7] for real Panda joint angles [7]."""
    return np.asarray(q_real7, dtype=float) - KITCHEN_OFFSETS


def kitchen_to_real(q_kitchen7) -> np.ndarray:
    """Real Panda joint angles [7] for Kitchen model joint angles [7]."""
    return np.asarray(q_kitchen7, dtype=float) + KITCHEN_OFFSETS


def width_to_fingers(width: float) -> np.ndarray:
    """Both finger slide positions [2] for a finger width; each finger moves half of it."""
    half = float(np.clip(width, 0.0, GRIPPER_MAX)) / 2.0
    return np.array([half, half])


def fingers_to_width(fingers) -> float:
    return float(np.sum(fingers))


def franka_assets() -> str:
    """The Kitchen Panda's asset folder inside the installed gymnasium-robotics."""
    spec = importlib.util.find_spec("gymnasium_robotics")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gymnasium-robotics is not installed (pip install gymnasium-robotics==1.4.2); "
                           "only its Franka Kitchen asset files are used")
    path = os.path.join(list(spec.submodule_search_locations)[0],
                        "envs", "assets", "kitchen_franka", "franka_assets")
    if not os.path.isfile(os.path.join(path, "chain.xml")):
        raise RuntimeError(f"no Franka Kitchen assets in {path}")
    return path


def _look_at(pos, target) -> str:
    """MJCF xyaxes of a camera at pos looking at target, image up roughly world +z."""
    forward = np.subtract(target, pos, dtype=float)
    forward /= np.linalg.norm(forward)
    x = np.cross(forward, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(x, forward)
    return _vec((*x, *y))


def _vec(values) -> str:
    return " ".join(f"{v:.4f}" for v in values)


@dataclass(frozen=True)
class Layout:
    """Where the cube and the bowl stand: centres (x, y) in the world frame and the
    cube's turn about z (rad)."""
    cube_xy: tuple
    cube_yaw: float
    bowl_xy: tuple


DEFAULT_LAYOUT = Layout(CUBE_START, 0.0, BOWL_CENTER)


def layout(seed: int) -> Layout:
    """The layout a seed gives (the evaluation contract: a seed places the cube and the
    bowl, nothing else): both uniform in the workspace, MIN_SEPARATION apart (redrawn
    until they are), the cube turned uniformly in [-pi/4, pi/4) (a square: that is all
    its turns)."""
    rng = np.random.default_rng(seed)
    lo, hi = (WORKSPACE_X[0], WORKSPACE_Y[0]), (WORKSPACE_X[1], WORKSPACE_Y[1])
    while True:
        cube, bowl = rng.uniform(lo, hi), rng.uniform(lo, hi)
        yaw = rng.uniform(-np.pi / 4, np.pi / 4)
        if np.linalg.norm(cube - bowl) >= MIN_SEPARATION:
            return Layout(tuple(float(v) for v in cube), float(yaw), tuple(float(v) for v in bowl))


def _bowl(center, radius=BOWL_RADIUS, height=BOWL_HEIGHT, n=12) -> str:
    """Static geoms of a bowl: a flat bottom and a ring of thin wall boxes."""
    geoms = [f'<geom type="cylinder" size="{radius} 0.004" pos="0 0 0.004" material="bowl"/>']
    wall = np.pi * radius / n * 1.1                    # half length: neighbours overlap a bit
    for k in range(n):
        a = 2 * np.pi * k / n
        geoms.append(f'<geom type="box" size="{BOWL_WALL} {wall:.4f} {height / 2}" '
                     f'pos="{radius * np.cos(a):.4f} {radius * np.sin(a):.4f} {height / 2}" '
                     f'euler="0 0 {a:.4f}" material="bowl"/>')
    return (f'<body name="bowl" pos="{center[0]} {center[1]} {TABLE_TOP}">'
            + "".join(geoms) + "</body>")


def scene_xml(assets: str | None = None) -> str:
    """The whole scene as MJCF text (absolute include and mesh paths)."""
    assets = assets or franka_assets()
    top = TABLE_TOP
    scene_pos, right_pos = (1.45, 0.0, top + 0.85), (0.45, -1.15, top + 0.55)
    scene_cam = _look_at(scene_pos, (0.30, 0.0, top + 0.20))
    right_cam = _look_at(right_pos, (0.35, 0.05, top + 0.20))
    return f"""
<mujoco model="panda_table">
  <include file="{assets}/assets.xml"/>
  <!-- after assets.xml, whose meshdir is relative to a file we do not load from -->
  <compiler angle="radian" meshdir="{assets}/meshes"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast"/>
  <visual>
    <!-- CPU rendering: no multisampling; an offscreen buffer big enough for any view -->
    <quality offsamples="0"/>
    <global offwidth="1280" offheight="1280"/>
    <headlight ambient="0.3 0.3 0.3" diffuse="0.4 0.4 0.4"/>
  </visual>
  <asset>
    <material name="floor" rgba="0.35 0.38 0.42 1"/>
    <material name="table" rgba="0.55 0.38 0.22 1"/>
    <material name="cube" rgba="0.85 0.1 0.1 1"/>
    <material name="bowl" rgba="0.2 0.35 0.8 1"/>
  </asset>
  <worldbody>
    <!-- shadows cost most of a CPU frame -->
    <light pos="0.5 -0.5 2.5" dir="0 0.3 -1" castshadow="false" diffuse="0.6 0.6 0.6"/>
    <light pos="0.5 0.8 2.5" dir="0 -0.3 -1" castshadow="false" diffuse="0.4 0.4 0.4"/>
    <geom name="floor" type="plane" size="3 3 0.1" material="floor"/>
    <geom name="table" type="box" size="0.6 0.6 0.02" pos="0.3 0 {top - 0.02}" material="table"/>
    <camera name="scene" pos="{_vec(scene_pos)}" xyaxes="{scene_cam}" fovy="55"/>
    <camera name="right" pos="{_vec(right_pos)}" xyaxes="{right_cam}" fovy="55"/>
    <body name="cube" pos="{CUBE_START[0]} {CUBE_START[1]} {top + CUBE_HALF}">
      <freejoint name="cube"/>
      <geom type="box" size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" mass="0.1" material="cube"
            friction="1 0.01 0.001"/>
    </body>
    {_bowl(BOWL_CENTER)}
    <body name="panda_base" pos="0 0 {top}">
      <include file="{assets}/chain.xml"/>
    </body>
  </worldbody>
  <include file="{assets}/actuator.xml"/>
</mujoco>
"""


def build_spec():
    """The scene as an MjSpec, with what MJCF text cannot say inside the included chain."""
    import mujoco   # the caller (panda_world) picks MUJOCO_GL before the first import

    spec = mujoco.MjSpec.from_string(scene_xml())
    # the Kitchen ranges differ from the real arm's (joint 4 stops at -0.4, joint 6 short
    # of the real top): use the real ones, so every real pose is reachable
    for name, lo, hi in zip(KITCHEN_ARM_JOINTS, real_to_kitchen(ARM_LOWER), real_to_kitchen(ARM_UPPER)):
        spec.joint(name).range = [lo, hi]
    for name, lo, hi in zip(KITCHEN_ACTUATORS, real_to_kitchen(ARM_LOWER), real_to_kitchen(ARM_UPPER)):
        spec.actuator(name).ctrlrange = [lo, hi]
    # the real arm's controller compensates gravity; without it the arm sags off its targets
    body = spec.body("panda0_link1")
    stack = [body]
    while stack:
        b = stack.pop()
        b.gravcomp = 1.0
        stack.extend(b.bodies)
    # wrist camera on the back of the hand, looking along the fingers and tilted a little
    # toward them, fingers at the bottom of the image (a camera looks down its -z; the
    # hand is link 7 turned -45 degrees about z, its fingers sliding along its y)
    hand_x, hand_y, z = np.array([1, -1, 0]) / np.sqrt(2), np.array([1, 1, 0]) / np.sqrt(2), np.array([0, 0, 1])
    tilt = 0.3
    y = np.cos(tilt) * hand_x + np.sin(tilt) * z
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, np.column_stack([hand_y, y, np.cross(hand_y, y)]).ravel())
    spec.body(HAND_BODY).add_camera(name="wrist", pos=0.065 * hand_x + 0.12 * z, quat=quat, fovy=75.0)
    return spec
