"""`oxygen report` scores a bag's task from the sim's /tf (tools/bag_task.py): the cube's
place over time and the episode's success, printed and in summary.json. The bag is
written here with rosbags (no ROS): a pick-and-place as the sim would publish it."""
import json

import numpy as np

from oxygen_ros.tools import panda_scene as ps

BOWL = (0.45, 0.25, ps.TABLE_TOP)


def write_tf_bag(path, samples, stamp0=100.0, dt=0.05, parent="world"):
    """samples: (cube xyz, gripper xyz) per message, each with the bowl, dt apart."""
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    T = store.types
    with Writer(path, version=9) as writer:
        conn = writer.add_connection("/tf", "tf2_msgs/msg/TFMessage", typestore=store)
        for i, (cube, grip) in enumerate(samples):
            t = stamp0 + i * dt
            stamp = T["builtin_interfaces/msg/Time"](sec=int(t), nanosec=int(round((t % 1) * 1e9)))
            tfs = [T["geometry_msgs/msg/TransformStamped"](
                       header=T["std_msgs/msg/Header"](stamp=stamp, frame_id=parent), child_frame_id=name,
                       transform=T["geometry_msgs/msg/Transform"](
                           translation=T["geometry_msgs/msg/Vector3"](x=p[0], y=p[1], z=p[2]),
                           rotation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)))
                   for name, p in (("cube", cube), ("bowl", BOWL), ("gripper", grip))]
            msg = T["tf2_msgs/msg/TFMessage"](transforms=tfs)
            writer.write(conn, int(t * 1e9), store.serialize_cdr(msg, "tf2_msgs/msg/TFMessage"))


def pick_and_place():
    """2 s on the table, 2 s carried (lifted 10 cm, in the fingers), 1 s falling over the
    bowl above its rim, 1 s on the bowl's floor with the fingers above: 20 Hz."""
    rest = np.array([0.5, 0.0, ps.CUBE_REST_Z])
    up = np.array([0.0, 0.0, 0.3])
    held = rest + [0, 0, 0.1]
    over = np.array([BOWL[0], BOWL[1], ps.TABLE_TOP + 0.1])
    floor = np.array([BOWL[0], BOWL[1], ps.CUBE_REST_Z + 0.008])
    return ([(rest, rest + up)] * 40 + [(held, held + [0, 0, 0.01])] * 40
            + [(over, over + [0, 0, 0.08])] * 20 + [(floor, floor + [0, 0, 0.12])] * 20)


def test_report_prints_and_writes_the_cubes_place_over_time_and_success(tmp_path, capsys):
    from oxygen_ros.cli import main

    write_tf_bag(tmp_path / "bag", pick_and_place())
    assert main(["report", str(tmp_path / "bag"), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    task = json.loads((tmp_path / "r" / "summary.json").read_text())["task"]
    assert task["success"] is True and task["final_place"] == "bowl" and task["tf_messages"] == 120
    # no frames in this bag: times from the first ground truth
    assert task["places"] == [{"place": "table", "start_s": 0.0, "end_s": 2.0},
                              {"place": "gripper", "start_s": 2.0, "end_s": 4.0},
                              {"place": "table", "start_s": 4.0, "end_s": 5.0},
                              {"place": "bowl", "start_s": 5.0, "end_s": 5.95}]
    assert "cube: table 0.0-2.0 s, gripper 2.0-4.0 s, table 4.0-5.0 s, bowl 5.0-6.0 s; success: yes" in out


def test_a_bag_without_ground_truth_has_no_task_and_says_so(tmp_path, capsys):
    from oxygen_ros.cli import main

    # frames in another parent than world are not the sim's ground truth
    write_tf_bag(tmp_path / "bag", pick_and_place()[:5], parent="map")
    assert main(["report", str(tmp_path / "bag"), "--out", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["task"] is None
    assert "cube: no ground truth in the bag" in capsys.readouterr().out
