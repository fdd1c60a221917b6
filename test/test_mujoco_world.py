"""The MuJoCo Panda world (tools/panda_world.py, tools/panda_scene.py), without ROS."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from oxygen_ros.tools import panda_scene as ps  # noqa: E402
from oxygen_ros.tools.panda_world import PandaWorld  # noqa: E402
from oxygen_ros.tools.trajectory_executor import TrajectoryExecutor  # noqa: E402

import mujoco  # noqa: E402  (after panda_world has chosen MUJOCO_GL)

# a pose away from READY on every joint, gripper half closed
TARGET = ps.READY + np.array([0.4, 0.25, -0.3, 0.35, 0.4, -0.35, 0.5, -0.04])
# gripper down and closed, fingertips 1.5 cm above the table, turned 0.4 rad away from the
# cube (joint 1 at 0 puts the tool centre over the cube: IK on the model)
LOW_BESIDE_CUBE = np.array([-0.40, 0.378, 0.0, -2.385, 0.0, 2.763, 0.785, 0.0])


@pytest.fixture
def world():
    w = PandaWorld()
    yield w
    w.close()


def test_joint_zero_mapping_ready_pose_points_down():
    """Real "ready" angles map into the Kitchen model's own joint ranges; there the gripper
    points straight down with the tool centre where the real Panda's forward kinematics
    put it (0.307, 0, 0.487 m from the base); real -> kitchen -> real is the identity."""
    kitchen = ps.real_to_kitchen(ps.READY[:7])
    original = mujoco.MjSpec.from_string(ps.scene_xml()).compile()   # Kitchen ranges unchanged
    ranges = np.array([original.joint(n).range for n in ps.KITCHEN_ARM_JOINTS])
    assert np.all(kitchen > ranges[:, 0]) and np.all(kitchen < ranges[:, 1])

    model = ps.build_spec().compile()
    data = mujoco.MjData(model)
    for name, value in zip(ps.KITCHEN_ARM_JOINTS, kitchen):
        data.joint(name).qpos = value
    mujoco.mj_kinematics(model, data)
    tcp = data.site(ps.TCP_SITE)
    approach = tcp.xmat.reshape(3, 3)[:, 2]
    assert approach @ [0.0, 0.0, -1.0] > 0.999
    assert np.allclose(tcp.xpos - [0.0, 0.0, ps.TABLE_TOP], [0.307, 0.0, 0.487], atol=0.005)

    q = np.random.default_rng(0).uniform(ps.ARM_LOWER, ps.ARM_UPPER, size=(20, 7))
    assert np.allclose(ps.kitchen_to_real(ps.real_to_kitchen(q)), q)
    assert np.allclose(ps.width_to_fingers(0.06), [0.03, 0.03])
    assert ps.fingers_to_width(ps.width_to_fingers(0.06)) == pytest.approx(0.06)


def test_world_starts_at_ready_in_real_units(world):
    """q, limits and names are in real Panda units: the world starts at rest in READY."""
    assert world.names == ps.JOINT_NAMES
    assert np.allclose(world.q, ps.READY, atol=1e-9)
    assert np.allclose(world.lower, ps.LOWER) and np.allclose(world.upper, ps.UPPER)
    assert np.allclose(world.velocities(), 0.0)


def test_accepts_simworld_arguments():
    """PandaWorld(names, lower, upper) as SimRobot builds it from the node params: the
    names are kept, the limits are narrowed to what the real Panda allows."""
    import yaml
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "config", "demo.yaml")) as f:
        p = yaml.safe_load(f)["/**"]["ros__parameters"]
    w = PandaWorld(p["joint_names"], p["joint_lower_limits"], p["joint_upper_limits"])
    assert w.names == p["joint_names"]
    assert np.all(w.lower >= ps.LOWER) and np.all(w.upper <= ps.UPPER)
    assert w.lower[5] == pytest.approx(-0.0175) and w.upper[3] == pytest.approx(-0.0698)
    with pytest.raises(ValueError):
        PandaWorld(["a", "b"], [0.0, 0.0], [1.0, 1.0])


def test_command_and_step_reach_the_target(world):
    """A position target sent with command() is reached by the actuators (measured: max
    error 0.025 rad after 0.5 s, 3e-4 after 1 s, below 1e-6 from 2 s on: gravity is
    compensated as on the real arm); commands are clipped to the limits."""
    world.command(TARGET)
    world.step(3.0)
    assert world.time == pytest.approx(3.0)
    error = np.abs(world.q - TARGET)
    assert np.all(error < 1e-3)
    assert np.all(np.abs(world.velocities()) < 1e-3)

    world.command(ps.UPPER + 1.0)
    assert np.allclose(world.commanded, ps.UPPER)


def test_step_carries_partial_timesteps(world):
    """step(dt) advances exactly dt in total, even for dt that are not whole 2 ms steps."""
    for _ in range(30):
        world.step(0.003)
    assert world.time == pytest.approx(0.09, abs=ps.TIMESTEP)


def test_trajectory_executor_drives_the_arm(world):
    """A 2-point trajectory sampled at 100 Hz into command() moves every joint the way the
    trajectory goes, follows it closely (measured: at most 0.022 rad behind the command,
    RMS 0.014) and ends at its last point."""
    executor = TrajectoryExecutor(world.names, world.q)
    start = world.q
    executor.receive(world.names, 0.0, [1.0, 2.0], [ps.READY + 0.5 * (TARGET - ps.READY), TARGET],
                     now=0.0)
    rate = 100.0
    measured, commanded = [], []
    for k in range(int(3.0 * rate)):
        positions, _ = executor.sample(k / rate)
        world.command(positions)
        world.step(1.0 / rate)
        measured.append(world.q)
        commanded.append(positions)
    measured, commanded = np.array(measured), np.array(commanded)
    direction = np.sign(TARGET - start)
    halfway = measured[int(1.0 * rate)] - start
    assert np.all(np.sign(halfway) == direction)
    assert np.all(np.diff(measured[:, :7], axis=0) * direction[:7] > -1e-3)   # no going back
    assert np.max(np.abs(measured - commanded)[:, :7]) < 0.05
    assert np.all(np.abs(measured[-1] - TARGET) < 2e-3)


def test_cube_rests_on_table_and_is_pushed(world):
    """The cube settles on the table top (centre within 2 mm of top + half size), is not
    touched while the arm moves beside it, and a closed gripper swept through it pushes it
    along the table (flat on it again once the arm has left)."""
    world.step(0.5)
    rest = world.cube_position()
    assert rest[2] == pytest.approx(ps.TABLE_TOP + ps.CUBE_HALF, abs=0.002)
    assert np.allclose(rest[:2], ps.CUBE_START, atol=0.002)

    world.command(LOW_BESIDE_CUBE)
    world.step(2.0)
    assert np.allclose(world.cube_position(), rest, atol=0.002)      # not touched on the way
    sweep = LOW_BESIDE_CUBE.copy()
    for joint1 in np.linspace(-0.40, 0.10, 100):                    # 1 s, through the cube
        sweep[0] = joint1
        world.command(sweep)
        world.step(0.01)
    world.command(ps.READY)                                         # back up, off the cube
    world.step(2.0)
    pushed = world.cube_position()
    assert pushed[1] - rest[1] > 0.05                               # measured: 0.092 m
    assert pushed[2] == pytest.approx(rest[2], abs=0.002)


RENDER_CHECK = r"""
import json, os, sys
import numpy as np
from oxygen_ros.tools.panda_world import PandaWorld
from oxygen_ros.tools import panda_scene as ps
w = PandaWorld()
images = {v: w.render(v, 96) for v in ps.CAMERAS}
wide = w.render("base", 64)
target = ps.READY.copy()
target[0] += 0.6
w.command(target)
w.step(1.5)
moved = w.render("base", 96)
w.close()
diff = lambda a, b: float(np.abs(a.astype(int) - b.astype(int)).mean())
views = list(images)
print(json.dumps({
    "gl": os.environ.get("MUJOCO_GL"),
    "shapes": [list(i.shape) for i in images.values()] + [list(wide.shape)],
    "dtypes": sorted({str(i.dtype) for i in images.values()}),
    "pair_diffs": [diff(images[a], images[b]) for a in views for b in views if a < b],
    "moved_diff": diff(images["base"], moved),
    "base_mean": float(images["base"].mean()),
}))
"""


def test_cameras_render_without_a_display():
    """With MUJOCO_GL and DISPLAY unset, the world picks EGL itself; the three views render
    uint8 HxWx3 of the asked size, differ from each other, and the scene image changes
    when the arm moves."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-c", RENDER_CHECK], env=env, cwd=root,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["gl"] == "egl"
    assert out["shapes"] == [[96, 96, 3]] * 3 + [[64, 64, 3]]
    assert out["dtypes"] == ["uint8"]
    assert 10 < out["base_mean"] < 245                 # neither black nor blank
    assert min(out["pair_diffs"]) > 5.0
    assert out["moved_diff"] > 0.5
    assert "Exception ignored" not in run.stderr       # renderers closed cleanly


def test_no_gl_context_names_the_packages():
    """Without a usable GL backend (here glfw and no display) rendering raises a RuntimeError
    that names MUJOCO_GL and the Debian packages EGL needs; the physics still runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MUJOCO_GL"] = "glfw"
    check = ("from oxygen_ros.tools.panda_world import PandaWorld\n"
             "w = PandaWorld(); w.step(0.1)\n"
             "try:\n    w.render('base', 32)\nexcept RuntimeError as e:\n    print(e)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-c", check], env=env, cwd=root,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "MUJOCO_GL=glfw" in run.stdout
    assert "libegl1 libegl-mesa0 libgl1-mesa-dri" in run.stdout
