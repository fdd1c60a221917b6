"""oxygen_node in fleet mode (tiny profile) serves three robots from one process, over real DDS.

Each robot is a driver process under its own namespace (/ROBOT/camera/..., /ROBOT/joint_states
in; /ROBOT/joint_trajectory, /ROBOT/narration, /ROBOT/ask_progress out). One robot has joint
names of its own (ROBOT.joint_names in the params file) and another its own instruction.
Each gets chunks with its joint names, its own narrations and answers to its own questions;
while one robot's cameras are off it gets no chunk and /diagnostics names its cameras,
and the other two keep their rate; it resumes by itself. Then the fleet goes through
deactivate (every robot's chunks stop) and activate (they resume). Bounds count control
ticks at the params' rate. Run by pytest; this file is also the peer program.
"""
import time
import uuid

import pytest

from node_harness import node_processes
from ros_helpers import run_as_peer, run_peers

pytestmark = pytest.mark.ros

RATE_HZ = 5.0
ROBOTS = [f"r{uuid.uuid4().hex[:6]}_{i}" for i in range(3)]
OWN_JOINTS = [f"own_{i}" for i in range(8)]
OUTAGE_S = 3.0


def robot(namespace, fleet_node, role, *, deadline):
    """Play one robot: chunks and a narration, a question; role "outage": cameras off for
    OUTAGE_S; role "lifecycle": also deactivate and activate the fleet at the end."""
    from node_driver import JOINTS, Driver, sleep

    joints = OWN_JOINTS if role == "own_joints" else JOINTS
    d = Driver(namespace, fleet_node=fleet_node, joints=joints, image_shape=(32, 32))
    try:
        d.wait_until(lambda: len(d.chunks) >= 10, 60.0, "10 chunks")
        d.wait_until(lambda: any(r["stream"] == "narration" and r["done"] for r in d.text_requests()), 60.0,
                     "a finished narration")
        answer = d.ask("what have you done so far?", timeout_s=20.0, wait=30.0)
        before = time.monotonic()
        sleep(1.0)
        outage = None
        if role == "outage":
            start = time.monotonic()
            for i in range(3):
                d.mode[i] = "off"
            sleep(OUTAGE_S)
            outage = [start, time.monotonic()]
            for i in range(3):
                d.mode[i] = "good"
            d.wait_until(lambda: d.chunks_since(outage[1]) >= 3, 30.0, "chunks after the outage")
            inputs = [m for level, m in d.diag_messages(start, "inputs") if level == 2]
        else:
            sleep(OUTAGE_S + 2.0)
            inputs = []
        lifecycle = None
        if role == "lifecycle":
            sleep(2.0)                     # the other robots' scenarios are over by now
            assert d.transition("deactivate"), "deactivate"
            off = time.monotonic()
            sleep(1.0)
            quiet = d.chunks_since(off + 0.5)
            assert d.transition("activate"), "activate"
            on = time.monotonic()
            d.wait_until(lambda: d.chunks_since(on) >= 3, 30.0, "chunks after activate")
            lifecycle = {"quiet": quiet}
        return {"chunk_times": d.chunk_times(), "names": [list(m.joint_names) for _, m in d.chunks[:3]],
                "narrations": [r["full_text"] for r in d.text_requests() if r["stream"] == "narration" and r["done"]],
                "answer": answer, "window": [before, time.monotonic()], "outage": outage,
                "input_errors": inputs, "lifecycle": lifecycle}
    finally:
        d.close()


def _rate(times, start, end) -> float:
    return sum(start <= t < end for t in times) / (end - start)


def test_one_node_serves_three_robots_each_in_its_namespace():
    a, b, c = ROBOTS
    overrides = {"robots": ROBOTS, "autostart": True, "control_rate_hz": RATE_HZ, "narration_every_n_frames": 5,
                 c: {"joint_names": OWN_JOINTS}, b: {"instruction": "open the drawer"}}
    with node_processes() as start:
        node = start(**overrides)
        roles = {a: "lifecycle", b: "outage", c: "own_joints"}
        r = run_peers(__file__, {n: ["robot", f"/{n}", node.name, roles[n]] for n in ROBOTS}, timeout=240)
        log = node.log()
    assert "fleet of 3 robots" in log, log[-3000:]
    for n in ROBOTS:
        assert r[n]["answer"]["success"], (n, r[n]["answer"])
        assert r[n]["narrations"], n
    from node_driver import JOINTS
    assert all(names == OWN_JOINTS for names in r[c]["names"]), r[c]["names"]
    assert all(names == JOINTS for n in (a, b) for names in r[n]["names"])
    # b's cameras off: b gets no chunk once its images are older than max_observation_age_s
    # (tiny: 0.5 s) and the frame in flight is out; the others keep their rate meanwhile
    start, end = r[b]["outage"]
    late = start + 0.5 + 2 / RATE_HZ
    assert not [t for t in r[b]["chunk_times"] if late <= t < end], r[b]["outage"]
    assert any("camera" in m for m in r[b]["input_errors"]), r[b]["input_errors"]
    for n in (a, c):
        before = _rate(r[n]["chunk_times"], r[n]["chunk_times"][0], start)
        during = _rate(r[n]["chunk_times"], late, end)
        assert during >= 0.6 * before, (n, before, during)
    # deactivating the fleet stopped every robot's chunks (a's counted), activating resumed them
    assert r[a]["lifecycle"]["quiet"] == 0, r[a]["lifecycle"]


if __name__ == "__main__":
    run_as_peer({"robot": robot})
