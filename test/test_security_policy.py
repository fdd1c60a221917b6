"""`oxygen security policy` against the running processes' graph, over real DDS.

The node (tiny, and a 2-robot fleet) runs in its own process; a peer reads its publishers,
subscriptions, services and clients through rclpy's graph API once it is active, and the
policy generated from the same params file must allow exactly those: everything the node
opens, nothing else. The processes around it (`oxygen sim`, `oxygen record`, `oxygen play`
and an rclpy stand-in for `ros2 service call`) run beside it, and everything each opens
must be allowed by its own enclave. The Fast DDS here has no security plugins, so
enforcement itself is not tested (docs/deployment.md, "Securing the robot").
"""
import time
import uuid
import xml.etree.ElementTree as ET

import pytest

from node_harness import node_processes
from ros_helpers import run_as_peer, run_peers

pytestmark = pytest.mark.ros


def graph(fqn, expect, *, deadline):
    """The node's interfaces once `expect` (a topic it publishes when configured) is among them."""
    import rclpy

    rclpy.init()
    node = rclpy.create_node(f"graph_{uuid.uuid4().hex[:8]}")
    ns, _, name = fqn.rpartition("/")
    try:
        last = None
        while time.monotonic() < deadline - 5:
            rclpy.spin_once(node, timeout_sec=0.2)
            try:
                found = {
                    "publish": sorted(t for t, _ in node.get_publisher_names_and_types_by_node(name, ns)),
                    "subscribe": sorted(t for t, _ in node.get_subscriber_names_and_types_by_node(name, ns)),
                    "reply": sorted(s for s, _ in node.get_service_names_and_types_by_node(name, ns)),
                    "request": sorted(s for s, _ in node.get_client_names_and_types_by_node(name, ns)),
                }
            except Exception:  # noqa: BLE001 - the node is not discovered yet
                continue
            if expect in found["publish"] and found == last:      # configured, and the graph settled
                return found
            last = found
            time.sleep(0.3)
        raise TimeoutError(f"{fqn} never published {expect}: {last}")
    finally:
        node.destroy_node()
        rclpy.shutdown()


def _policy_of(node, params_file):
    from oxygen_ros.tools.params_files import params_from_file
    from oxygen_ros.tools.security_policy import node_interfaces, policy_xml

    interfaces = node_interfaces(params_from_file(params_file), node.namespace)
    return interfaces, ET.fromstring(policy_xml([interfaces]).split("\n", 1)[1])


def _allowed(profile, kind: str, verb: str) -> set:
    return {e.text for group in profile.findall(f"{kind}[@{verb}='ALLOW']") for e in group}


def _check_live_graph_matches(overrides: dict, expect: str):
    with node_processes() as start:
        node = start(autostart=True, **overrides)
        live = run_peers(__file__, {"g": ["graph", node.name, expect.format(ns=node.namespace)]}, timeout=90)["g"]
        interfaces, policy = _policy_of(node, node.params_file)
    profile = policy.find(f"enclaves/enclave[@path='/oxygen/node']/profiles/profile[@ns='{node.namespace}']")
    assert profile is not None and profile.get("node") == "oxygen_node"
    for kind, verb in (("topics", "publish"), ("topics", "subscribe"), ("services", "reply"),
                       ("services", "request")):
        allowed = _allowed(profile, kind, verb)
        opened = set(live[verb])
        assert opened <= allowed, f"{verb}: opened but not allowed {sorted(opened - allowed)}"
        assert allowed <= opened, f"{verb}: allowed but not opened {sorted(allowed - opened)}"
    return interfaces, policy


def test_policy_allows_exactly_what_the_node_opens():
    interfaces, policy = _check_live_graph_matches({"publish_camera_views": True}, "{ns}/joint_trajectory")
    # the robot's drivers publish its inputs and follow its trajectory; the operator asks
    robot = policy.find("enclaves/enclave[@path='/oxygen/robot']/profiles/profile")
    assert _allowed(robot, "topics", "publish") >= set(interfaces.robots[0].inputs)
    assert _allowed(robot, "topics", "subscribe") >= set(interfaces.robots[0].trajectories)
    operator = _enclave_allows(policy, "/oxygen/operator")
    assert f"{interfaces.fqn}/ask_progress" in operator["request"]
    assert f"{interfaces.fqn}/set_parameters" in operator["request"]
    assert not operator["publish"] & set(interfaces.robots[0].inputs)
    assert not _enclave_allows(policy, "/oxygen/recorder")["publish"] & set(interfaces.robots[0].inputs)


def test_fleet_policy_allows_exactly_what_the_fleet_node_opens():
    a, b = (f"r{uuid.uuid4().hex[:6]}_{i}" for i in range(2))
    interfaces, policy = _check_live_graph_matches(
        {"robots": [a, b], b: {"trajectory_topic": "arm_controller/joint_trajectory"}}, f"/{b}/arm_controller/joint_trajectory")
    for r in (a, b):             # one driver enclave per robot namespace
        profile = policy.find(f"enclaves/enclave[@path='/oxygen/robot/{r}']/profiles/profile")
        assert profile is not None and profile.get("ns") == f"/{r}"
        assert all(t.startswith(f"/{r}/") for t in _allowed(profile, "topics", "publish") - {"/rosout", "/parameter_events"})


def test_policy_document_has_sros2s_structure(tmp_path):
    """version 0.2.0; enclaves > enclave[path] > profiles > profile[ns, node] > topics/services
    with ALLOW, every name absolute; the command writes it."""
    import subprocess
    import sys

    from node_harness import ROOT

    out = tmp_path / "policy.xml"
    r = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "security", "policy", "--params",
                        str(ROOT / "config" / "fleet.yaml"), "--out", str(out)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    root = ET.parse(out).getroot()
    assert root.tag == "policy" and root.get("version") == "0.2.0"
    paths = [e.get("path") for e in root.findall("enclaves/enclave")]
    assert paths == ["/oxygen/node", "/oxygen/operator", "/oxygen/recorder", "/oxygen/robot/arm1",
                     "/oxygen/robot/arm2", "/oxygen/robot/arm3"], paths
    for profile in root.iter("profile"):
        assert profile.get("ns", "").startswith("/") and profile.get("node")
        for group in profile:
            assert group.tag in ("topics", "services") and set(group.attrib.values()) == {"ALLOW"}
            assert all(e.text.startswith("/") for e in group)
    bad = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "security", "policy", "--params",
                          str(tmp_path / "missing.yaml")], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "missing.yaml" in bad.stderr


# ------------------------------------------------ every enclave against its processes' graph

REQUESTER = "_ros2cli_requester_oxygen_msgs_AskProgress"   # ros2service's `call`: _ros2cli_requester_<pkg>_<Srv>


def graphs(*fqns, deadline):
    """Each node's interfaces (fqn: {publish, subscribe, reply, request}) once all are
    discovered and unchanged over two reads a second apart."""
    import rclpy

    rclpy.init()
    node = rclpy.create_node(f"graph_{uuid.uuid4().hex[:8]}")

    def read(fqn):
        ns, _, name = fqn.rpartition("/")
        ns = ns or "/"
        return {"publish": sorted(t for t, _ in node.get_publisher_names_and_types_by_node(name, ns)),
                "subscribe": sorted(t for t, _ in node.get_subscriber_names_and_types_by_node(name, ns)),
                "reply": sorted(s for s, _ in node.get_service_names_and_types_by_node(name, ns)),
                "request": sorted(s for s, _ in node.get_client_names_and_types_by_node(name, ns))}
    try:
        last, found = None, None
        while time.monotonic() < deadline - 3:
            rclpy.spin_once(node, timeout_sec=0.2)
            try:
                found = {fqn: read(fqn) for fqn in fqns}
            except Exception:  # noqa: BLE001 - not discovered yet
                time.sleep(0.5)
                continue
            if found == last and all(g["publish"] for g in found.values()):
                return found
            last = found
            time.sleep(1.0)
        raise TimeoutError(f"graph never settled: {found}")
    finally:
        node.destroy_node()
        rclpy.shutdown()


def requester(service, seconds, *, deadline):
    """What `ros2 service call SERVICE oxygen_msgs/srv/AskProgress` runs (ros2service's
    requester: rclpy.init(), a default rclpy node named _ros2cli_requester_<pkg>_<Srv>, one
    client), kept alive `seconds` so that the graph can be read."""
    import rclpy
    from oxygen_msgs.srv import AskProgress

    from ros_helpers import call_service

    rclpy.init()
    node = rclpy.create_node(REQUESTER)
    try:
        client = node.create_client(AskProgress, service)
        end = min(deadline, time.monotonic() + float(seconds))
        reply = call_service(node, client, AskProgress.Request(question="what have you done?"), end, service)
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.1)
        return {"answered": reply is not None}
    finally:
        node.destroy_node()
        rclpy.shutdown()


def _input_bag(path, topics):
    """A 40 s bag of one joint state a second on each of `topics` (`oxygen play` keeps
    publishing while the graph is read)."""
    import numpy as np
    from rosbags.rosbag2 import StoragePlugin, Writer

    from oxygen_ros.tools.bag_types import typestore

    store = typestore()
    M = store.types
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conns = [w.add_connection(t, "sensor_msgs/msg/JointState", typestore=store) for t in topics]
        for i in range(40):
            t_ns = (100 + i) * 1_000_000_000
            msg = M["sensor_msgs/msg/JointState"](
                header=M["std_msgs/msg/Header"](stamp=M["builtin_interfaces/msg/Time"](sec=100 + i, nanosec=0),
                                                frame_id=""),
                name=["joint_1"], position=np.zeros(1), velocity=np.zeros(0), effort=np.zeros(0))
            for c in conns:
                w.write(c, t_ns, store.serialize_cdr(msg, c.msgtype))


def _policy(*args):
    """The policy `oxygen security policy ARGS` prints (as a user runs it)."""
    import subprocess
    import sys

    from node_harness import ROOT

    r = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "security", "policy", *map(str, args)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return ET.fromstring(r.stdout.split("\n", 1)[1])


def _enclave_allows(policy, path: str) -> dict:
    """What one enclave's participant may do: the union of its profiles (DDS permissions
    are per participant, one per enclave)."""
    enclave = policy.find(f"enclaves/enclave[@path='{path}']")
    allowed = {v: set() for v in ("publish", "subscribe", "reply", "request")}
    for profile in ([] if enclave is None else enclave.iter("profile")):
        for kind, verb in (("topics", "publish"), ("topics", "subscribe"), ("services", "reply"),
                           ("services", "request")):
            allowed[verb] |= _allowed(profile, kind, verb)
    return allowed


def test_every_enclave_allows_what_its_processes_open(tmp_path):
    """The node (/oxygen/node), `oxygen sim` and `oxygen play` (/oxygen/robot), `oxygen
    record` (/oxygen/recorder) and a `ros2 service call` (/oxygen/operator) run together;
    each one's publishers, subscriptions, services and clients, read from the live graph,
    are allowed by its enclave (under Enforce, anything else fails to be created). Only the
    node may publish /parameter_events (the audit trail `oxygen report` reads): the sim,
    the player and the recorder do not open it."""
    import subprocess
    import sys

    from node_harness import ROOT
    from ros_helpers import peer_env

    cli = [sys.executable, "-m", "oxygen_ros.cli"]
    bag = tmp_path / "inputs"
    _input_bag(bag, ["/joint_states"])
    procs = []
    with node_processes() as start:
        node = start(autostart=True)
        ns = node.namespace
        logs = {}

        def spawn(name, *args):
            logs[name] = tmp_path / f"{name}.log"
            procs.append(subprocess.Popen([*cli, *args], stdout=open(logs[name], "w"), stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=ROOT, env=peer_env()))
        try:
            spawn("sim", "sim", "--params", str(node.params_file), "--namespace", ns, "--image-size", "32",
                  "--camera-hz", "2", "--joint-hz", "10", "--control-hz", "20", "--quiet", "--duration", "80")
            spawn("record", "record", "--out", str(tmp_path / "bag"), "--params", str(node.params_file),
                  "--namespace", ns, "--duration", "80", "--quiet")
            spawn("play", "play", str(bag), "--namespace", ns)
            fqns = [node.name, f"{ns}/oxygen_sim", f"{ns}/oxygen_recorder", "/oxygen_player", f"/{REQUESTER}"]
            out = run_peers(__file__, {"graph": ["graphs", *fqns],
                                       "call": ["requester", f"{node.name}/ask_progress", "22"]}, timeout=90)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
            for name, log in logs.items():
                sys.stdout.write(f"\n--- {name} log ---\n{log.read_text()[-3000:]}\n")
        live = out["graph"]
        assert out["call"]["answered"], out["call"]
        policy = _policy("--params", node.params_file, "--namespace", ns)
    enclaves = {node.name: "/oxygen/node", f"{ns}/oxygen_sim": "/oxygen/robot", "/oxygen_player": "/oxygen/robot",
                f"{ns}/oxygen_recorder": "/oxygen/recorder", f"/{REQUESTER}": "/oxygen/operator"}
    refused = []
    for fqn, path in enclaves.items():
        allowed = _enclave_allows(policy, path)
        for verb, names in live[fqn].items():
            refused += [f"{path} ({fqn}) may not {verb} {n}" for n in names if n not in allowed[verb]]
    assert not refused, "\n".join(refused)
    for fqn in (f"{ns}/oxygen_sim", "/oxygen_player", f"{ns}/oxygen_recorder"):
        assert "/parameter_events" not in live[fqn]["publish"], (fqn, live[fqn]["publish"])
    assert "/parameter_events" in live[f"{ns}/oxygen_recorder"]["subscribe"]


def test_only_the_node_and_the_ros2_cli_enclaves_may_publish_parameter_events():
    """/parameter_events is the audit trail `oxygen report` reads: the robot's drivers, the
    sim, the player and the recorder may not write it. The operator's enclave may only
    because stock ros2cli's rclpy node always publishes it (rclpy has no switch for it and
    `ros2 service call` passes no remap rules)."""
    from node_harness import ROOT

    policy = _policy("--params", ROOT / "config" / "fleet.yaml")
    writers = sorted(e.get("path") for e in policy.findall("enclaves/enclave")
                     if "/parameter_events" in _enclave_allows(policy, e.get("path"))["publish"])
    assert writers == ["/oxygen/node", "/oxygen/operator"], writers
    recorder = _enclave_allows(policy, "/oxygen/recorder")
    assert "/parameter_events" in recorder["subscribe"], recorder


def test_policy_follows_launch_overrides_and_remaps():
    """What will run, not only the params file: fleet.launch.py's robots:= (--robots), a
    -p name:=value override and a -r from:=to remap change the node's topics and the
    robots' enclaves exactly as they change what the node opens."""
    from node_harness import ROOT

    policy = _policy("--params", ROOT / "config" / "fleet.yaml", "--robots", "left,right",
                     "-p", "trajectory_topic:=arm_controller/joint_trajectory",
                     "-r", "/right/joint_states:=/right/hw/joint_states")
    paths = [e.get("path") for e in policy.findall("enclaves/enclave")]
    assert [p for p in paths if p.startswith("/oxygen/robot")] == ["/oxygen/robot/left", "/oxygen/robot/right"], paths
    node = _enclave_allows(policy, "/oxygen/node")
    assert {"/left/arm_controller/joint_trajectory", "/right/arm_controller/joint_trajectory"} <= node["publish"]
    assert "/left/joint_trajectory" not in node["publish"]
    assert "/right/hw/joint_states" in node["subscribe"] and "/right/joint_states" not in node["subscribe"]
    right = _enclave_allows(policy, "/oxygen/robot/right")
    assert "/right/hw/joint_states" in right["publish"] and "/right/joint_states" not in right["publish"]
    assert "/right/arm_controller/joint_trajectory" in right["subscribe"]


def test_policy_of_a_node_started_with_overrides_and_remaps_matches_its_live_graph(tmp_path):
    """A node started with `-p robots:=[...]` (what robots:= does) and a remap opens what
    `oxygen security policy --robots ... -r ...` allows, exactly."""
    import subprocess
    import sys

    import yaml

    from node_harness import ROOT, tiny_params
    from ros_helpers import peer_env

    a, b = (f"r{uuid.uuid4().hex[:6]}_{i}" for i in range(2))
    params = tmp_path / "params.yaml"
    # the file's robots, replaced on the command line (names YAML 1.1 would not read as booleans)
    fleet = tiny_params(autostart=True, robots=["file_a", "file_b"])
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": fleet}}))
    remap = f"/{b}/joint_states:=/{b}/hw/joint_states"
    log = tmp_path / "node.log"
    proc = subprocess.Popen([sys.executable, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(params),
                             "-p", f"robots:=[{a}, {b}]", "-r", remap], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, env=peer_env())
    try:
        live = run_peers(__file__, {"g": ["graph", "/oxygen_node", f"/{b}/joint_trajectory"]}, timeout=90)["g"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        sys.stdout.write(log.read_text()[-3000:])
    policy = _policy("--params", params, "--robots", f"{a},{b}", "-r", remap)
    profile = policy.find("enclaves/enclave[@path='/oxygen/node']/profiles/profile[@ns='/']")
    for kind, verb in (("topics", "publish"), ("topics", "subscribe"), ("services", "reply"),
                       ("services", "request")):
        allowed, opened = _allowed(profile, kind, verb), set(live[verb])
        assert opened == allowed, (verb, sorted(opened - allowed), sorted(allowed - opened))


if __name__ == "__main__":
    run_as_peer({"graph": graph, "graphs": graphs, "requester": requester})
