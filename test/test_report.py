"""`oxygen report`: exact figures from a bag with known timing, in both rosbag2 storages.

The bag is written directly with rosbags (CDR from rclpy.serialization, definitions
from the typestore), as `ros2 bag record` writes it: sqlite3 (ros2 bag's default
before Jazzy) and MCAP. 20 frames at 10 Hz, frames 5 and 6 over their deadline, one
narration, one answer, one unfinished memory entry, all at known frames.
"""
import json

import pytest

from oxygen_ros.cli import main

T0 = 1_700_000_000.0
PERIOD = 0.1
PHASES = {"prefill_ms": 10.0, "action_ms": 20.0, "admit_ms": 5.0, "decode_ms": 15.0}


def end_of(frame: int) -> float:
    return T0 + PERIOD * frame + 0.05


def write_bag(path, storage: str, ns: str = "/robot", dropped=lambda i: i % 2):
    """Messages built and serialised with the rosbags typestore (CDR as DDS carries it);
    frame i reports dropped(i) chunk points already past."""
    import numpy as np
    from rosbags.rosbag2 import StoragePlugin, Writer

    from oxygen_ros.tools.bag_types import typestore

    store = typestore()
    T = store.types
    Time, Duration = T["builtin_interfaces/msg/Time"], T["builtin_interfaces/msg/Duration"]
    Header = T["std_msgs/msg/Header"]

    def header(t):
        sec = int(t)
        return Header(stamp=Time(sec=sec, nanosec=int(round((t - sec) * 1e9))), frame_id="")

    empty = np.zeros(0, dtype=np.float64)
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    with Writer(path, version=9, storage_plugin=plugin) as w:
        conns = {name: w.add_connection(f"{ns}/{name}" if name[0] != "/" else name, msgtype, typestore=store)
                 for name, msgtype in [("joint_trajectory", "trajectory_msgs/msg/JointTrajectory"),
                                       ("frame_timing", "oxygen_msgs/msg/FrameTiming"),
                                       ("narration", "oxygen_msgs/msg/TextChunk"),
                                       ("memory", "oxygen_msgs/msg/TextChunk"),
                                       ("answer", "oxygen_msgs/msg/TextChunk"),
                                       ("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray")]}

        def put(name, msg, t):
            w.write(conns[name], int(t * 1e9) + 1_000_000, store.serialize_cdr(msg, conns[name].msgtype))

        text = {2: [("narration", 1, 2, "The robot", 4, False)],
                3: [("narration", 1, 2, " reaches", 8, False)],
                4: [("narration", 1, 2, " out.", 10, True)],
                11: [("answer", 2, 10, "I picked", 3, False)],
                12: [("answer", 2, 10, " it up.", 6, True)],
                15: [("memory", 3, 15, "Moved", 2, False)]}
        full = {"narration": "The robot reaches out.", "answer": "I picked it up."}
        for i in range(20):
            t = end_of(i)
            # chunk i holds position 0.01 i at its three points, 0.1 s apart from its stamp
            points = [T["trajectory_msgs/msg/JointTrajectoryPoint"](
                positions=np.full(1, 0.01 * i), velocities=empty, accelerations=empty, effort=empty,
                time_from_start=Duration(sec=0, nanosec=k * 100_000_000)) for k in (1, 2, 3)]
            put("joint_trajectory", T["trajectory_msgs/msg/JointTrajectory"](
                header=header(t), joint_names=["a"], points=points), t)
            missed = i in (5, 6)
            tokens = sum(tc - {3: 4, 4: 8, 12: 3}.get(i, 0) for _, _, _, _, tc, _ in text.get(i, []))
            put("frame_timing", T["oxygen_msgs/msg/FrameTiming"](
                header=header(t), frame_index=i, observation_stamp=Time(sec=0, nanosec=0),
                total_ms=130.0 if missed else 50.0, decode_steps=1, live_requests=0, queued_requests=0,
                tokens_emitted=tokens, period_ms=100.0, deadline_missed=missed, kv_bytes_in_use=0,
                chunk_ms=31.0, chunk_latency_ms=40.0 + i, points_dropped=dropped(i), rtc_delay_steps=2 * (i > 0),
                expert_names=["hands"], expert_action_ms=np.array([7.0 + i % 2], np.float32), **PHASES), t)
            for stream, rid, start, delta, count, done in text.get(i, []):
                put(stream, T["oxygen_msgs/msg/TextChunk"](
                    header=header(t), stream=stream, request_id=rid, start_frame=start, delta=delta,
                    token_count=count, done=done, full_text=full[stream] if done else ""), t)
        status = T["diagnostic_msgs/msg/DiagnosticStatus"](
            level=0, name="/robot/oxygen_node: control loop", message="", hardware_id="tiny",
            values=[T["diagnostic_msgs/msg/KeyValue"](key="skipped_ticks", value="3")])
        put("/diagnostics", T["diagnostic_msgs/msg/DiagnosticArray"](header=header(end_of(19)), status=[status]),
            end_of(19))


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_report_figures_from_a_known_run(tmp_path, storage, capsys):
    """Intervals, rate, misses and per-request frames/seconds/tokens are exact, whatever
    the storage; the PNG is written."""
    import matplotlib.image

    bag = tmp_path / "bag"
    write_bag(bag, storage)
    assert main(["report", str(bag), "--out", str(tmp_path / "rep")]) == 0
    s = json.loads((tmp_path / "rep" / "summary.json").read_text())
    c = s["chunks"]
    assert c["count"] == 20
    for key in ("mean", "p50", "p95", "max"):
        assert c["interval_ms"][key] == pytest.approx(100.0, abs=1e-3)
    assert c["achieved_rate_hz"] == pytest.approx(10.0, abs=1e-3)
    assert c["target_rate_hz"] == pytest.approx(10.0)
    assert c["points_per_chunk"] == 3 and c["point_period_s"] == pytest.approx(0.1)
    fr = s["frames"]
    assert fr["count"] == 20 and fr["deadline_misses"] == 2 and fr["skipped_ticks"] == 3
    assert fr["phase_ms_mean"] == pytest.approx({"prefill": 10.0, "action": 20.0, "admit": 5.0, "decode": 15.0})
    assert fr["expert_action_ms_mean"] == pytest.approx({"hands": 7.5})     # 7 and 8 ms alternating
    req = {r["stream"]: r for r in s["requests"]}
    n = req["narration"]
    assert (n["start_frame"], n["first_token_frame"], n["done_frame"]) == (2, 2, 4)
    assert (n["frames_to_first_token"], n["frames_to_done"]) == (0, 2)
    assert n["seconds_to_first_token"] == pytest.approx(0.05, abs=1e-3)
    assert n["seconds_to_done"] == pytest.approx(0.25, abs=1e-3)
    assert n["tokens"] == 10 and n["tokens_per_s"] == pytest.approx(40.0, rel=1e-2)
    assert n["text"] == "The robot reaches out."
    a = req["answer"]
    assert (a["frames_to_first_token"], a["frames_to_done"]) == (1, 2)
    assert a["seconds_to_first_token"] == pytest.approx(0.15, abs=1e-3)
    assert a["text"] == "I picked it up."
    m = req["memory"]
    assert not m["done"] and m["seconds_to_done"] is None and m["text"] == "Moved"
    lang = s["language"]
    assert (lang["requests"], lang["done"], lang["tokens"]) == (3, 2, 18)
    rt = s["robot_time"]
    assert rt["chunk_latency_ms"]["p50"] == pytest.approx(49.5) and rt["chunk_latency_ms"]["max"] == 59.0
    assert rt["chunk_in_frame_ms"]["p50"] == 31.0 and rt["points_dropped"] == 10 and rt["points_published"] == 60
    assert rt["rtc_guided_frames"] == 19 and rt["trajectories_rejected"] == 0
    assert rt["arm"] is None      # no joint states recorded
    # boundary jumps, replayed at the log times (stamp + 1 ms): chunk i replaces chunk i-1
    # whose points all hold 0.01 (i-1): the new plan is 0.01 away at its first point; the
    # old command is at rest, the new one runs from there to the first point, 99 ms ahead:
    # 0.01 / 0.099 = 0.10101 rad/s
    j = rt["boundary_jumps"]
    assert j["count"] == 19
    assert j["position_max"] == pytest.approx(0.01, abs=1e-6) and j["position_p95"] == pytest.approx(0.01, abs=1e-6)
    assert j["velocity_max"] == pytest.approx(0.01 / 0.099, rel=1e-3)
    assert lang["by_stream"]["narration"]["done"] == 1
    img = matplotlib.image.imread(tmp_path / "rep" / "timeline.png")
    assert img.shape[0] > 500 and img.shape[1] > 1000
    out = capsys.readouterr().out
    assert "20 in" in out and "10.00 Hz" in out and "deadline misses 2" in out
    assert "chunk latency ms p50 49.5 p95" in out and "MOST OF EACH CHUNK" not in out    # 10 of 70 past
    # 2 of 20 frames over their deadline (10%): the rate counts as not held, and it says so
    assert s["rate_held"] is False
    assert "RATE NOT HELD: 10.00 of 10.00 Hz, 2 of 20 frames (10.0%) over their 100 ms deadline" in out


def test_the_report_says_when_most_of_each_chunk_was_past_on_arrival(tmp_path, capsys):
    """A machine that computes chunks too slowly for the policy in wall time: most planned
    points are already past when their chunk is published, the arm runs only the rest, and
    the report says so (with the way out) instead of leaving it in a count."""
    bag = tmp_path / "bag"
    write_bag(bag, "sqlite3", dropped=lambda i: 10)     # 10 past, 3 published per chunk
    assert main(["report", str(bag), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "MOST OF EACH CHUNK WAS PAST ON ARRIVAL: 200 of 260 planned points (77%)" in out, out
    assert "oxygen eval --clock sim" in out
    write_bag(tmp_path / "bag2", "sqlite3", dropped=lambda i: 8)      # 160 of 220 (73%): a slow arm, no note
    assert main(["report", str(tmp_path / "bag2"), "--out", str(tmp_path / "rep2")]) == 0
    assert "MOST OF EACH CHUNK" not in capsys.readouterr().out


def test_rate_held_needs_the_rate_and_under_5_percent_misses():
    from oxygen_ros.tools.bag_summary import rate_held

    def summary(achieved, misses):
        return {"chunks": {"achieved_rate_hz": achieved, "target_rate_hz": 2.0},
                "frames": {"deadline_miss_fraction": misses}}

    assert rate_held(summary(1.95, 0.0)) is True
    assert rate_held(summary(1.85, 0.0)) is False          # under 95% of the target
    assert rate_held(summary(2.0, 0.049)) is True
    assert rate_held(summary(2.0, 0.05)) is False
    assert rate_held(summary(None, 0.0)) is None


def test_demo_rate_is_the_configured_one_or_what_the_median_frame_allows():
    from oxygen_ros.tools.demo_rate import MARGIN, holdable_rate_hz

    assert holdable_rate_hz([40.0, 50.0, 60.0], 8.0) == 8.0              # 1000/(2.3*50) = 8.7 Hz
    assert holdable_rate_hz([700.0, 800.0, 3000.0], 2.0) == 0.5          # median 800: 1000/1840 = 0.54
    assert 1e3 / holdable_rate_hz([900.0], 2.0) >= MARGIN * 900.0        # the period keeps the headroom
    # never zero, and never below what the node accepts (else its configure fails)
    from oxygen_ros.node.params import SPEC
    assert holdable_rate_hz([1e6], 2.0) == SPEC["control_rate_hz"].range[0]


def test_report_rejects_a_folder_without_a_bag(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "metadata.yaml" in capsys.readouterr().err


def test_report_of_a_bag_without_messages(tmp_path):
    """A recording that caught nothing (node never active) still gives a report: counts
    0, figures None, a PNG."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from oxygen_ros.tools.bag_types import typestore

    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as w:
        w.add_connection("/joint_trajectory", "trajectory_msgs/msg/JointTrajectory", typestore=typestore())
    assert main(["report", str(tmp_path / "bag"), "--out", str(tmp_path / "rep")]) == 0
    s = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert s["chunks"]["count"] == 0 and s["chunks"]["achieved_rate_hz"] is None
    assert s["language"]["requests"] == 0 and (tmp_path / "rep" / "timeline.png").is_file()


def test_parameter_values_as_plain_python():
    """ParameterValue -> Python by its type, from rclpy's messages and rosbags' alike."""
    from rcl_interfaces.msg import ParameterType, ParameterValue
    from rclpy.parameter import Parameter

    from oxygen_ros.tools.bag_parameters import parameter_value
    from oxygen_ros.tools.bag_types import typestore

    for value in (True, 7, 0.25, "pick", [1, 2], [0.5, 1.5], [True, False], ["a", "b"]):
        got = parameter_value(Parameter("p", value=value).to_parameter_msg().value)
        assert got == value and type(got) is type(value), (value, got)
        assert all(type(g) is type(v) for g, v in zip(got, value)) if isinstance(value, list) else True
    assert parameter_value(ParameterValue(type=ParameterType.PARAMETER_BYTE_ARRAY,
                                          byte_array_value=[b"\x01", b"\xff"])) == [1, 255]
    assert parameter_value(ParameterValue()) is None                       # not set
    # rosbags' decoded messages hold numpy arrays
    import numpy as np

    PV = typestore().types["rcl_interfaces/msg/ParameterValue"]
    empty = {f: np.zeros(0, t) for f, t in (("byte_array_value", np.uint8), ("bool_array_value", bool),
                                            ("integer_array_value", np.int64), ("double_array_value", float))}
    fields = dict(bool_value=False, integer_value=0, double_value=0.0, string_value="", string_array_value=[])
    got = parameter_value(PV(type=ParameterType.PARAMETER_DOUBLE_ARRAY,
                             **{**fields, **empty, "double_array_value": np.array([2.9, 0.08])}))
    assert got == [2.9, 0.08] and all(type(x) is float for x in got)
    assert parameter_value(PV(type=ParameterType.PARAMETER_INTEGER, **{**fields, **empty, "integer_value": 5})) == 5


def _event(node: str, new: dict = {}, changed: dict = {}):
    """A ParameterEvent of the rosbags typestore (bool, int, float, str and float/str lists)."""
    import numpy as np

    from oxygen_ros.tools.bag_types import typestore

    T = typestore().types
    arrays = {"byte_array_value": np.uint8, "bool_array_value": bool, "integer_array_value": np.int64,
              "double_array_value": np.float64}

    def value(v):
        kind = ({bool: 1, int: 2, float: 3, str: 4}.get(type(v))
                or {float: 8, str: 9}[type(v[0])])
        fields = {"bool_value": False, "integer_value": 0, "double_value": 0.0, "string_value": "",
                  "string_array_value": [], **{f: np.zeros(0, t) for f, t in arrays.items()}}
        field = {1: "bool_value", 2: "integer_value", 3: "double_value", 4: "string_value",
                 8: "double_array_value", 9: "string_array_value"}[kind]
        fields[field] = np.array(v, np.float64) if kind == 8 else v
        return T["rcl_interfaces/msg/ParameterValue"](type=kind, **fields)

    def params(values):
        return [T["rcl_interfaces/msg/Parameter"](name=k, value=value(v)) for k, v in values.items()]

    return T["rcl_interfaces/msg/ParameterEvent"](
        stamp=T["builtin_interfaces/msg/Time"](sec=0, nanosec=0), node=node,
        new_parameters=params(new), changed_parameters=params(changed), deleted_parameters=[])


def test_report_lists_the_accepted_parameter_changes(tmp_path, capsys):
    """/parameter_events in a bag: every changed parameter with its time since the bag's
    start, node, old value (from a declaration or an earlier change; None when unseen) and
    new value; declarations are no changes; the recorder's own node and ros2 bag's are
    skipped. The report prints them, and "none" for a bag without changes."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from oxygen_ros.tools.bag_recorder import RECORDER_NODE_KEY
    from oxygen_ros.tools.bag_types import typestore

    node, t0 = "/robot/oxygen_node", 1_700_000_000
    events = [(0.0, _event(node, new={"narration_every_n_frames": 5, "instruction": "pick"})),
              (0.5, _event("/robot/oxygen_recorder", changed={"use_sim_time": True})),
              (1.0, _event(node, changed={"narration_every_n_frames": 7})),
              (1.5, _event("/rosbag2_recorder", changed={"x": 1})),
              (2.0, _event(node, changed={"narration_every_n_frames": 9, "joint_upper_limits": [2.9, 0.08]})),
              (2.5, _event("/other", changed={"instruction": "place"}))]
    store = typestore()
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as w:
        w.set_custom_data(RECORDER_NODE_KEY, "/robot/oxygen_recorder")
        conn = w.add_connection("/parameter_events", "rcl_interfaces/msg/ParameterEvent", typestore=store)
        for t, event in events:
            w.write(conn, int((t0 + t) * 1e9), store.serialize_cdr(event, conn.msgtype))
    assert main(["report", str(tmp_path / "bag"), "--out", str(tmp_path / "rep")]) == 0
    s = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert s["parameter_changes"] == [
        {"t": 1.0, "node": node, "name": "narration_every_n_frames", "old": 5, "new": 7},
        {"t": 2.0, "node": node, "name": "narration_every_n_frames", "old": 7, "new": 9},
        {"t": 2.0, "node": node, "name": "joint_upper_limits", "old": None, "new": [2.9, 0.08]},
        {"t": 2.5, "node": "/other", "name": "instruction", "old": None, "new": "place"}]
    out = capsys.readouterr().out
    assert "parameter changes: 4\n" in out
    assert f"  1.0 s {node} narration_every_n_frames: 5 -> 7\n" in out
    assert f"  2.0 s {node} joint_upper_limits: ? -> [2.9, 0.08]\n" in out

    (tmp_path / "empty").mkdir()
    test_report_of_a_bag_without_messages(tmp_path / "empty")
    assert "parameter changes: none" in capsys.readouterr().out
