"""`oxygen security policy` against the running node's graph, over real DDS.

The node (tiny, and a 2-robot fleet) runs in its own process; a peer reads its publishers,
subscriptions, services and clients through rclpy's graph API once it is active, and the
policy generated from the same params file must allow exactly those: everything the node
opens, nothing else. The Fast DDS here has no security plugins, so enforcement itself is
not tested (docs/deployment.md, "Securing the robot").
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
    operator = policy.find("enclaves/enclave[@path='/oxygen/operator']/profiles/profile")
    assert f"{interfaces.fqn}/ask_progress" in _allowed(operator, "services", "request")
    assert f"{interfaces.fqn}/set_parameters" in _allowed(operator, "services", "request")
    assert not _allowed(operator, "topics", "publish") & set(interfaces.robots[0].inputs)


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
    assert paths == ["/oxygen/node", "/oxygen/operator", "/oxygen/robot/arm1", "/oxygen/robot/arm2",
                     "/oxygen/robot/arm3"], paths
    for profile in root.iter("profile"):
        assert profile.get("ns", "").startswith("/") and profile.get("node")
        for group in profile:
            assert group.tag in ("topics", "services") and set(group.attrib.values()) == {"ALLOW"}
            assert all(e.text.startswith("/") for e in group)
    bad = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "security", "policy", "--params",
                          str(tmp_path / "missing.yaml")], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "missing.yaml" in bad.stderr


if __name__ == "__main__":
    run_as_peer({"graph": graph})
