"""`oxygen demo` and `oxygen eval` learn that oxygen_node's lifecycle service answers before
they send the one configure: a refused transition, sent again until one is answered. A request
lost to discovery (here: sent before the service exists, as one can be lost while the
response's channel is still being matched on a loaded machine) is never answered; the probe
still ends. Real rclpy and DDS: the node's lifecycle service is a ChangeState server.

Run by pytest; this file is also the peer program (`python test_lifecycle_probe.py ROLE ...`).
"""
import time

import pytest

from ros_helpers import run_as_peer, run_peers, unique_name


def prober(deadline):
    import rclpy
    from lifecycle_msgs.srv import ChangeState
    from rclpy.executors import SingleThreadedExecutor

    from oxygen_ros.tools.demo_monitor import DemoMonitor

    rclpy.init()
    node_name = unique_name("probed_node")
    watcher = rclpy.create_node(unique_name("probe_watcher"))
    mon = DemoMonitor(watcher, {}, print, node_name=f"/{node_name}")
    once = mon.transition("no_such_transition")          # the old way: sent once
    answered = mon.lifecycle_answers(resend_s=0.5)
    assert not answered()                                 # its first request: to no one yet
    time.sleep(1.0)

    requests = []

    def on_change(request, response):
        requests.append(request.transition.label)
        response.success = False                          # unknown: refused, nothing changes
        return response

    server = rclpy.create_node(node_name)
    server.create_service(ChangeState, f"/{node_name}/change_state", on_change)
    ex = SingleThreadedExecutor()
    ex.add_node(watcher)
    ex.add_node(server)
    end = time.monotonic() + 20.0
    while not answered() and time.monotonic() < min(end, deadline):
        ex.spin_once(timeout_sec=0.05)
    result = {"answered": answered(), "once_done": once.done(), "requests": requests}
    ex.shutdown()
    rclpy.shutdown()
    return result


@pytest.mark.ros
def test_the_lifecycle_probe_is_resent_until_the_node_answers():
    r = run_peers(__file__, {"prober": ["prober"]})["prober"]
    assert r["answered"], r
    assert r["requests"] and set(r["requests"]) == {"no_such_transition"}, r
    assert not r["once_done"], r           # the request sent once was lost: the old wait never ended


if __name__ == "__main__":
    run_as_peer({"prober": prober})
