"""`oxygen eval --robots N --clock sim` (issue 41): a fleet's lock-step sims share one sim
clock. Two real `oxygen sim` processes, started with the argv oxygen eval gives them, and a
peer that plays oxygen_node: it answers one robot's observation, then the other's. The clock
(and the first robot's next observation) must wait until every robot has acted on the
current sim time; else the robots drift apart, a lagging robot's inputs go stale on the
shared clock and it never gets another chunk (what `oxygen eval --robots 2` did). The run
is a --cameras off one: both sims' cameras are black."""
import time
from pathlib import Path

import pytest

from ros_helpers import peer_env, run_as_peer, run_peers, spin_until

JOINTS = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "joint_7", "gripper"]


def drive(ns1, ns2, deadline):
    """Act for ns1 first, then ns2, at sim time 1.0; then ns2 first, then ns1, at 1.1. Returns
    the /clock and each robot's observation stamp seen after each single chunk."""
    import rclpy
    from builtin_interfaces.msg import Duration
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import Image, JointState
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    rclpy.init()
    node = rclpy.create_node("fake_oxygen_node")
    clock = [0]
    latest = {ns1: None, ns2: None}           # (stamp ns, positions)

    def ns_of(t):
        return t.sec * 1_000_000_000 + t.nanosec

    node.create_subscription(Clock, "/clock", lambda m: clock.__setitem__(0, max(clock[0], ns_of(m.clock))), 10)
    for ns in latest:
        node.create_subscription(JointState, f"{ns}/joint_states",
                                 lambda m, ns=ns: latest.__setitem__(ns, (ns_of(m.header.stamp), list(m.position))),
                                 qos_profile_sensor_data)
    brightest = {}                            # per robot: (the brightest pixel seen, image shape)
    for ns in latest:
        node.create_subscription(Image, f"{ns}/camera/base/image_raw",
                                 lambda m, ns=ns: brightest.__setitem__(ns, (max(
                                     brightest.get(ns, (0,))[0], max(m.data, default=0)), [m.height, m.width])),
                                 qos_profile_sensor_data)
    pubs = {ns: node.create_publisher(JointTrajectory, f"{ns}/joint_trajectory",
                                      QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
            for ns in latest}

    def at(t_ns):
        return lambda: all(v is not None and v[0] >= t_ns for v in latest.values()) and clock[0] >= t_ns

    def act(ns, t_ns):
        msg = JointTrajectory(joint_names=JOINTS, points=[
            JointTrajectoryPoint(positions=latest[ns][1], time_from_start=Duration(nanosec=100_000_000 * k))
            for k in range(1, 11)])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t_ns, 1_000_000_000)
        pubs[ns].publish(msg)

    def settle(seconds):
        end = time.monotonic() + seconds
        spin_until(node, lambda: time.monotonic() > end, deadline, "a pause")

    t0, t1, t2 = 1_000_000_000, 1_100_000_000, 1_200_000_000
    spin_until(node, lambda: at(t0)() and all(p.get_subscription_count() for p in pubs.values()), deadline,
               "both robots' first observations, /clock and their trajectory subscriptions")
    seen = {}
    act(ns1, t0)
    settle(1.5)
    seen["after_first_only"] = {"clock": clock[0], "stamps": {ns: latest[ns][0] for ns in latest}}
    act(ns2, t0)
    spin_until(node, at(t1), deadline, "both robots at 1.1 s once both acted")
    act(ns2, t1)
    settle(1.5)
    seen["after_second_only"] = {"clock": clock[0], "stamps": {ns: latest[ns][0] for ns in latest}}
    act(ns1, t1)
    spin_until(node, at(t2), deadline, "both robots at 1.2 s once both acted")
    seen["end"] = {"clock": clock[0], "stamps": {ns: latest[ns][0] for ns in latest}}
    seen["brightest"] = brightest
    node.destroy_node()
    rclpy.shutdown()
    return seen


@pytest.mark.ros
def test_a_fleets_lockstep_sims_advance_the_clock_together(tmp_path):
    from oxygen_ros.tools import evaluation as ev
    from oxygen_ros.tools.child_processes import Children
    from oxygen_ros.tools.sim_robots import SimRobot

    root = Path(__file__).resolve().parents[1]
    e = ev.Evaluation(ev.Options(params=root / "config" / "tiny.yaml", seeds=[900000, 900001], out=tmp_path,
                                 robots=2, image_size=32, blackout=True), say=lambda _: None)
    robots = [SimRobot(name, e._robot_params(name), tmp_path / name, seed)
              for name, seed in zip(e.robot_names, [900000, 900001])]
    assert [r.namespace for r in robots] == ["/robot1", "/robot2"]
    children = Children(tmp_path / "logs", env=peer_env())
    try:
        for i, r in enumerate(robots):
            children.start(r.child("sim"), e._sim_argv(r, i == 0), cwd=root)
        for r in robots:
            assert children.children[r.child("sim")].wait_for_line("sim: ", 90.0), \
                children.children[r.child("sim")].log_tail(2000)
        seen = run_peers(__file__, {"driver": ["drive", "/robot1", "/robot2"]}, timeout=60.0)["driver"]
    finally:
        children.stop_all()
    t0, t1, t2 = 1_000_000_000, 1_100_000_000, 1_200_000_000
    # one robot acted: neither the clock nor its own next observation moves on without the other
    assert seen["after_first_only"] == {"clock": t0, "stamps": {"/robot1": t0, "/robot2": t0}}, seen
    assert seen["after_second_only"] == {"clock": t1, "stamps": {"/robot1": t1, "/robot2": t1}}, seen
    assert seen["end"] == {"clock": t2, "stamps": {"/robot1": t2, "/robot2": t2}}, seen
    assert seen["brightest"] == {"/robot1": [0, [32, 32]], "/robot2": [0, [32, 32]]}, seen


if __name__ == "__main__":
    run_as_peer({"drive": drive})
