"""Launch files and deployment profiles: what a launch file decides is reachable with
`oxygen_node --ros-args --params-file ...`, and every profile parameter is one the node
declares, of the declared type and within its range.

launch_ros is not installable here: the launch files are parsed (ast) always, and
imported and expanded only where launch_ros imports.
"""
import ast
import importlib.util
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ros_helpers import peer_env

ROOT = Path(__file__).resolve().parents[1]
THOR = ROOT / "config" / "humanoid_thor.yaml"
LAUNCH = {"humanoid_thor": ROOT / "launch" / "humanoid_thor.launch.py",
          "demo": ROOT / "launch" / "demo.launch.py",
          "fleet": ROOT / "launch" / "fleet.launch.py"}
THOR_ARGS = {"params_file", "namespace", "model", "checkpoint", "record", "record_dir", "enclave"}


def profile(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["/**"]["ros__parameters"]


def specs():
    from oxygen_ros.node import params as node_params

    return node_params.SPEC


def _type_ok(spec, value) -> bool:
    from rclpy.parameter import Parameter

    d = spec.default
    if isinstance(d, Parameter.Type):
        return {Parameter.Type.STRING_ARRAY: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                Parameter.Type.DOUBLE_ARRAY: lambda v: isinstance(v, list) and all(isinstance(x, float) for x in v),
                Parameter.Type.BOOL_ARRAY: lambda v: isinstance(v, list) and all(isinstance(x, bool) for x in v),
                }[d](value)
    if isinstance(d, bool):
        return isinstance(value, bool)
    if isinstance(d, float):
        return isinstance(value, float)          # ROS rejects 30 for a double: write 30.0
    if isinstance(d, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(d, list):
        return isinstance(value, list) and all(isinstance(x, type(d[0])) for x in value)
    return isinstance(value, type(d))


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "config").glob("*.yaml")))
def test_every_profile_parameter_is_declared_typed_and_in_range(name):
    """A typo or a stale name in a profile would be silently ignored by ROS: refuse it here."""
    from oxygen_ros.node.params import PER_ROBOT

    spec = specs()
    params = profile(ROOT / "config" / name)
    robots = params.get("robots", [])
    # a fleet's per-robot sections: ROBOT.NAME for NAME in PER_ROBOT
    flat = {k: v for k, v in params.items() if k not in robots}
    for robot in robots:
        section = params.get(robot, {})
        assert set(section) <= set(PER_ROBOT), f"{name}: {robot}: not per-robot: {set(section) - set(PER_ROBOT)}"
        flat.update({f"{robot}.{k}": v for k, v in section.items()})
    unknown = sorted(k for k in flat if k.split(".")[-1] not in spec)
    assert not unknown, f"{name}: parameters the node does not declare: {unknown}"
    for key, value in flat.items():
        s = spec[key.split(".")[-1]]
        assert _type_ok(s, value), f"{name}: {key} = {value!r} is not of the declared type"
        if s.range is not None:
            lo, hi = s.range
            assert lo <= value <= hi, f"{name}: {key} = {value} outside [{lo}, {hi}]"


def test_thor_profile_is_complete_commented_and_fits_pi05():
    """Every node parameter is set and commented; π0.5 on CUDA in bfloat16, 3 cameras,
    at most 32 joints with valid limits, replanning at 5 Hz with 50 Hz actions and RTC on
    (what π0.5 holds on Thor by the public figures), request sizes within the KV slots."""
    from oxygen_ros.engine.models.pi05.configuration import PI05

    spec = specs()
    p = profile(THOR)
    required = {k for k, s in spec.items() if s.required}   # optional arrays may stay commented out
    assert required <= set(p), f"missing: {sorted(required - set(p))}"
    assert (p["model"], p["dtype"]) == ("pi05", "bfloat16") and p["device"].startswith("cuda")
    assert p["control_rate_hz"] == 5.0 and p["autostart"] is False
    assert p["action_rate_hz"] == 50.0 and p["rtc_mode"] == "guided" and p["trajectory_velocities"] is True
    # a chunk (50 points at 50 Hz) outlasts a replanning period plus the ~165 ms latency
    assert PI05.expert.horizon / p["action_rate_hz"] > 1 / p["control_rate_hz"] + 0.165
    assert len(p["camera_topics"]) == len(PI05.camera_slots) == 3
    assert "head" in p["camera_topics"][0] and all("wrist" in t for t in p["camera_topics"][1:])
    names = p["joint_names"]
    assert 14 <= len(names) <= PI05.expert.action_dim == 32 and len(set(names)) == len(names)
    for side in ("left", "right"):
        for j in ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch",
                  "wrist_yaw"):
            assert f"{side}_{j}_joint" in names
        assert any(n.startswith(f"{side}_hand_") for n in names)
    lo, hi = p["joint_lower_limits"], p["joint_upper_limits"]
    assert len(lo) == len(hi) == len(names) and all(a < b for a, b in zip(lo, hi))
    for stream in ("narration", "memory", "answer"):
        assert p[f"{stream}_max_tokens"] <= p["max_new_tokens"]
    assert p["max_requests"] >= 2 + p["max_concurrent_questions"]
    # narrations at k steps per frame finish before the next one is due
    assert p["narration_max_tokens"] / max(p["steps_per_frame"], 1) < p["narration_every_n_frames"]
    # at most a few periods of observation age
    assert p["max_observation_age_s"] <= 4 / p["control_rate_hz"]

    # commented parameter by parameter: a comment above each key (a group of up to three
    # like the lower and upper limits or the *_max_tokens may share one) or on its line
    lines = THOR.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^    (\w+):", line)
        if not m or m.group(1) not in spec or "  # " in line:
            continue
        keys_between, j = 0, i - 1
        while not lines[j].strip().startswith("#"):
            assert lines[j].startswith("    ") and lines[j].strip(), f"{m.group(1)} has no comment above it"
            keys_between += bool(re.match(r"^    \w+:", lines[j]))
            j -= 1
        assert keys_between <= 2, f"{m.group(1)} has no comment of its own"


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", None)) == name]


def _declared_args(tree) -> set:
    return {c.args[0].value for c in _calls(tree, "DeclareLaunchArgument")}


def test_launch_files_parse_and_only_pick_a_profile_and_a_few_overrides():
    """Without launch_ros: the thor launch file declares the documented arguments, its
    default profile exists, it starts a LifecycleNode of oxygen_node that it configures
    on process start and activates on reaching inactive, its overrides are node
    parameters, and the executables it names are this package's console scripts."""
    setup_py = (ROOT / "setup.py").read_text()
    tree = ast.parse(LAUNCH["humanoid_thor"].read_text())
    assert _declared_args(tree) == THOR_ARGS
    consts = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    assert (ROOT / "config" / consts["PROFILE"]).is_file()
    node = _calls(tree, "LifecycleNode")
    assert len(node) == 1
    kw = {k.arg: k.value for k in node[0].keywords}
    assert (kw["package"].value, kw["executable"].value, kw["name"].value) == ("oxygen_ros", "oxygen_node",
                                                                              "oxygen_node")
    transitions = {k.value.attr for c in _calls(tree, "ChangeState") for k in c.keywords if k.arg == "transition_id"}
    assert transitions == {"TRANSITION_CONFIGURE", "TRANSITION_ACTIVATE"}
    goal = [k.value.value for c in _calls(tree, "OnStateTransition") for k in c.keywords if k.arg == "goal_state"]
    assert goal == ["inactive"] and _calls(tree, "OnProcessStart")
    overrides = next(n for n in ast.walk(tree) if isinstance(n, ast.DictComp))
    names = {e.value for e in overrides.generators[0].iter.elts}
    assert names == {"model", "checkpoint"} and names <= set(specs())
    for path in LAUNCH.values():
        t = ast.parse(path.read_text())
        for c in _calls(t, "ExecutableInPackage"):
            exe = {k.arg: k.value.value for k in c.keywords}["executable"]
            assert f'"{exe} = oxygen_ros.' in setup_py, exe
    demo = ast.parse(LAUNCH["demo"].read_text())
    assert _declared_args(demo) == {"params_file", "namespace", "record"}
    assert "smol_panda.yaml" in LAUNCH["demo"].read_text() and "humanoid_thor.launch.py" in LAUNCH["demo"].read_text()
    fleet = ast.parse(LAUNCH["fleet"].read_text())
    assert _declared_args(fleet) == {"params_file", "robots", "sims", "enclave"}
    for tree in (ast.parse(LAUNCH["humanoid_thor"].read_text()), fleet):     # an SROS2 enclave for the node
        kw = {k.arg: k.value for k in _calls(tree, "LifecycleNode")[0].keywords}
        assert "--enclave" in ast.unparse(kw["ros_arguments"])
    kw = {k.arg: k.value for k in _calls(fleet, "LifecycleNode")[0].keywords}
    kw = {k.arg: k.value for k in _calls(fleet, "LifecycleNode")[0].keywords}
    assert (kw["executable"].value, kw["name"].value) == ("oxygen_node", "oxygen_fleet")
    assert "robots" in profile(ROOT / "config" / "fleet.yaml")


def test_fleet_launch_starts_one_node_and_a_sim_per_robot_where_launch_ros_exists():
    pytest.importorskip("launch_ros")
    from launch import LaunchContext
    from launch.actions import ExecuteProcess, OpaqueFunction
    from launch_ros.actions import LifecycleNode

    ld = _load_launch(LAUNCH["fleet"]).generate_launch_description()
    setup = next(e for e in ld.entities if isinstance(e, OpaqueFunction))
    ctx = LaunchContext()
    ctx.launch_configurations.update(params_file=str(ROOT / "config" / "fleet.yaml"), robots="a,b", sims="true")
    actions = setup.function(ctx)
    assert sum(isinstance(a, LifecycleNode) for a in actions) == 1
    assert sum(isinstance(a, ExecuteProcess) and not isinstance(a, LifecycleNode) for a in actions) == 2


def _load_launch(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_launch_files_generate_descriptions_where_launch_ros_exists():
    pytest.importorskip("launch_ros")
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction, RegisterEventHandler
    from launch_ros.actions import LifecycleNode

    ld = _load_launch(LAUNCH["humanoid_thor"]).generate_launch_description()
    args = {e.name for e in ld.entities if isinstance(e, DeclareLaunchArgument)}
    assert args == THOR_ARGS
    setup = next(e for e in ld.entities if isinstance(e, OpaqueFunction))
    ctx = LaunchContext()
    ctx.launch_configurations.update(params_file=str(THOR), namespace="robot", model="", checkpoint="/data/ck",
                                     record="true", record_dir="/tmp/bag")
    actions = setup.function(ctx)
    assert sum(isinstance(a, LifecycleNode) for a in actions) == 1
    assert sum(isinstance(a, RegisterEventHandler) for a in actions) == 2
    assert sum(isinstance(a, ExecuteProcess) and not isinstance(a, LifecycleNode) for a in actions) == 1
    demo = _load_launch(LAUNCH["demo"]).generate_launch_description()
    assert {e.name for e in demo.entities if isinstance(e, DeclareLaunchArgument)} == {"params_file", "namespace",
                                                                                       "record"}


@pytest.mark.ros
def test_node_configures_and_activates_with_the_thor_params_file(tmp_path):
    """`oxygen_node --ros-args --params-file config/humanoid_thor.yaml` with only the
    model (pi05-quarter: π0.5's structure, 32 action dims, random weights), device, dtype
    and weight paths overridden: no parameter is refused, configure succeeds with the
    28 joints and 3 cameras, the node goes active, and SIGINT ends it cleanly."""
    log = tmp_path / "node.log"
    cmd = [sys.executable, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(THOR),
           "-r", "__ns:=/thor_test", "-p", "model:=pi05-quarter", "-p", "device:=cpu", "-p", "dtype:=float32",
           "-p", 'checkpoint:=""', "-p", 'tokenizer_path:=""', "-p", "torch_threads:=1", "-p", "autostart:=true"]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=peer_env(), cwd=ROOT)
    try:
        import time

        end = time.monotonic() + 120
        while "active: control loop" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert "configure failed" not in log.read_text(), log.read_text()
            assert time.monotonic() < end, "not active after 120 s:\n" + log.read_text()
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "parameter " not in text.split("configured in")[0], text     # no refused parameter
    m = re.search(r"configured in [\d.]+ s: model pi05-quarter, .* 3 camera\(s\) .* 28 joints, replanning at 5 Hz, actions at 50 Hz", text)
    assert m, text
