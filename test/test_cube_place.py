"""The cube's place by the evaluation contract (tools/cube_place.py), the layouts a seed
gives (tools/panda_scene.layout) and the MuJoCo world's ground truth they are read from
(PandaWorld.frames, grasp_contact). No ROS, no rendering."""
import numpy as np
import pytest

from oxygen_ros.tools import cube_place, panda_scene as ps

BOWL = np.array([0.45, 0.25, ps.TABLE_TOP])
FAR = np.array([0.0, -0.4, 1.0])          # a gripper far from everything


def test_place_rule_gripper_bowl_table_at_the_thresholds():
    """gripper: within 4 cm of the gripper frame AND at least 1 cm above the cube's rest
    height; bowl: inside the inner radius and below the rim; table: otherwise."""
    rest = np.array([0.5, 0.0, ps.CUBE_REST_Z])
    assert ps.BOWL_INNER_RADIUS == pytest.approx(0.076) and ps.BOWL_HEIGHT == pytest.approx(0.04)
    assert cube_place.place(rest, BOWL, FAR) == "table"
    # held: lifted 2 cm, gripper 3.9 cm away -> gripper; 4.1 cm away -> table
    lifted = rest + [0, 0, 0.02]
    assert cube_place.place(lifted, BOWL, lifted + [0, 0, 0.039]) == "gripper"
    assert cube_place.place(lifted, BOWL, lifted + [0, 0, 0.041]) == "table"
    # closed fingers around a cube still on the table (lifted 0.9 cm): not yet in the gripper
    assert cube_place.place(rest + [0, 0, 0.009], BOWL, rest + [0, 0, 0.009]) == "table"
    assert cube_place.place(rest + [0, 0, 0.011], BOWL, rest + [0, 0, 0.011]) == "gripper"
    # in the bowl: on its floor, 7.5 cm off centre; 7.7 cm off centre is outside
    floor = np.array([BOWL[0], BOWL[1], ps.CUBE_REST_Z + 0.008])
    assert cube_place.place(floor, BOWL, FAR) == "bowl"
    assert cube_place.place(floor + [0.075, 0, 0], BOWL, FAR) == "bowl"
    assert cube_place.place(floor + [0.077, 0, 0], BOWL, FAR) == "table"
    # over the bowl above the rim (falling, or carried high): not in it
    assert cube_place.place([BOWL[0], BOWL[1], BOWL[2] + 0.041], BOWL, FAR) == "table"
    # the fingers that just let go, next to a cube on the bowl's floor: bowl
    assert cube_place.place(floor, BOWL, floor + [0, 0, 0.02]) == "bowl"
    # held over the bowl below the rim: the gripper rule comes first
    assert cube_place.place(floor + [0, 0, 0.01], BOWL, floor + [0, 0, 0.01]) == "gripper"


def test_success_is_the_last_place_and_segments_cover_the_run():
    assert cube_place.success(["table", "gripper", "bowl"])
    assert not cube_place.success(["table", "bowl", "gripper", "table"])
    assert not cube_place.success([])
    segs = cube_place.segments([0.0, 1.0, 2.0, 3.0, 4.0], ["table", "table", "gripper", "bowl", "bowl"])
    assert segs == [{"place": "table", "start_s": 0.0, "end_s": 2.0},
                    {"place": "gripper", "start_s": 2.0, "end_s": 3.0},
                    {"place": "bowl", "start_s": 3.0, "end_s": 4.0}]


def test_a_seed_places_cube_and_bowl_in_the_workspace_apart_and_always_the_same():
    layouts = [ps.layout(s) for s in range(200)]
    assert ps.layout(7) == layouts[7] and ps.layout(7) != ps.layout(8)
    for lay in layouts:
        for x, y in (lay.cube_xy, lay.bowl_xy):
            assert ps.WORKSPACE_X[0] <= x <= ps.WORKSPACE_X[1] and ps.WORKSPACE_Y[0] <= y <= ps.WORKSPACE_Y[1]
        assert np.hypot(*np.subtract(lay.cube_xy, lay.bowl_xy)) >= ps.MIN_SEPARATION
        assert -np.pi / 4 <= lay.cube_yaw < np.pi / 4
    spread = np.array([lay.cube_xy for lay in layouts])
    assert np.ptp(spread[:, 0]) > 0.2 and np.ptp(spread[:, 1]) > 0.4      # the whole workspace is used


def test_world_ground_truth_frames_follow_the_layout_and_the_fingers():
    """frames(): cube and bowl where the seed put them; gripper = the fingertips' centre,
    between the finger pads, below the TCP site along the approach axis; grasp_contact()
    is false with the cube on the table away from the fingers."""
    from oxygen_ros.tools.panda_world import PandaWorld

    lay = ps.layout(3)
    with PandaWorld(layout=lay) as world:
        f = world.frames()
        assert set(f) == {"cube", "bowl", "gripper"}
        pos, quat = f["cube"]
        assert np.allclose(pos, [*lay.cube_xy, ps.CUBE_REST_Z], atol=1e-3)
        assert np.allclose(quat, [np.cos(lay.cube_yaw / 2), 0, 0, np.sin(lay.cube_yaw / 2)], atol=1e-3)
        assert np.allclose(f["bowl"][0], [*lay.bowl_xy, ps.TABLE_TOP], atol=1e-9)
        tcp = world.data.site(ps.TCP_SITE).xpos
        grip = f["gripper"][0]
        assert np.allclose(grip[:2], tcp[:2], atol=1e-3) and 0.01 < tcp[2] - grip[2] < 0.03
        assert np.linalg.norm(f["gripper"][1]) == pytest.approx(1.0)
        world.step(0.5)                            # the cube settles where it stands
        assert np.allclose(world.frames()["cube"][0], [*lay.cube_xy, ps.CUBE_REST_Z], atol=2e-3)
        assert not world.grasp_contact()
        assert cube_place.place(f["cube"][0], f["bowl"][0], grip) == "table"


def test_a_cube_put_in_the_bowl_is_in_the_bowl_and_stays_there():
    """put_cube: the cube where it is put (frames for narration off the demonstrations'
    path); in the bowl it settles on the floor, and the place rule says bowl."""
    from oxygen_ros.tools.panda_world import PandaWorld

    lay = ps.layout(3)
    with PandaWorld(layout=lay) as world:
        world.put_cube((*lay.bowl_xy, ps.CUBE_REST_Z + 0.005), yaw=0.3)
        f = world.frames()
        assert np.allclose(f["cube"][0], [*lay.bowl_xy, ps.CUBE_REST_Z + 0.005], atol=1e-9)
        assert np.allclose(f["cube"][1], [np.cos(0.15), 0, 0, np.sin(0.15)], atol=1e-9)
        world.step(0.5)
        f = world.frames()
        assert np.linalg.norm(f["cube"][0][:2] - np.asarray(lay.bowl_xy)) < 0.01
        assert cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0]) == "bowl"
