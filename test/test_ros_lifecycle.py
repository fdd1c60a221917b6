"""A lifecycle node in one process is driven through configure, activate, deactivate and
shutdown by another process over the real lifecycle_msgs ChangeState/GetState services.

Run by pytest; this file is also the peer program (`python test_lifecycle.py ROLE ...`).
"""

import time

import pytest

from ros_helpers import run_as_peer, run_peers, spin_until, unique_name


# ----------------------------------------------------------------- peers

def lifecycle_node(name, topic, *, deadline):
    """A LifecycleNode in the ros2/demos lifecycle_py style: publisher and timer made in
    on_configure, data flows only while active, everything freed on cleanup/shutdown.
    Exits when finalized and the driver has left the graph."""
    import rclpy
    from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
    from std_msgs.msg import String

    class Talker(LifecycleNode):
        def __init__(self):
            super().__init__(name)
            self.transitions = []
            self.publisher = None
            self.timer = None
            self.sent = 0
            self.finalized = False

        def tick(self):
            if self.publisher is not None and self.publisher.is_activated:
                self.sent += 1
                self.publisher.publish(String(data=f"tick {self.sent}"))

        def on_configure(self, state):
            self.transitions.append("configure")
            self.publisher = self.create_lifecycle_publisher(String, topic, 10)
            self.timer = self.create_timer(0.02, self.tick)
            return TransitionCallbackReturn.SUCCESS

        def on_activate(self, state):
            self.transitions.append("activate")
            return super().on_activate(state)

        def on_deactivate(self, state):
            self.transitions.append("deactivate")
            return super().on_deactivate(state)

        def _release(self):
            if self.timer is not None:
                self.destroy_timer(self.timer)
            if self.publisher is not None:
                self.destroy_lifecycle_publisher(self.publisher)
            self.timer = self.publisher = None

        def on_cleanup(self, state):
            self.transitions.append("cleanup")
            self._release()
            return TransitionCallbackReturn.SUCCESS

        def on_shutdown(self, state):
            self.transitions.append("shutdown")
            self._release()
            self.finalized = True
            return TransitionCallbackReturn.SUCCESS

    rclpy.init()
    node = Talker()
    change_state = f"/{name}/change_state"
    try:
        spin_until(node, lambda: node.finalized, deadline, "the shutdown transition")
        spin_until(node, lambda: node.count_clients(change_state) == 0, deadline,
                   "the driver to leave the graph")
    finally:
        node.destroy_node()
        rclpy.shutdown()
    return {"transitions": node.transitions, "sent": node.sent}


def driver(name, topic, *, deadline):
    """Drives the node's transitions and reads its state after each one."""
    import rclpy
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState, GetState
    from std_msgs.msg import String

    rclpy.init()
    node = rclpy.create_node(unique_name("oxygen_lifecycle_driver"))
    received = []
    node.create_subscription(String, topic, lambda m: received.append(m.data), 10)
    change = node.create_client(ChangeState, f"/{name}/change_state")
    get = node.create_client(GetState, f"/{name}/get_state")
    steps = []

    def call(client, request, what):
        # ChangeState is not idempotent: one call, waited for until the deadline.
        future = client.call_async(request)
        spin_until(node, future.done, deadline, what)
        return future.result()

    def state_label():
        return call(get, GetState.Request(), "a GetState response").current_state.label

    def transition(transition_id, label):
        request = ChangeState.Request()
        request.transition.id = transition_id
        ok = call(change, request, f"the {label} transition").success
        steps.append({"transition": label, "success": ok, "state": state_label()})

    try:
        spin_until(node, lambda: change.service_is_ready() and get.service_is_ready(), deadline,
                   "the lifecycle services")
        steps.append({"transition": None, "success": True, "state": state_label()})

        transition(Transition.TRANSITION_CONFIGURE, "configure")
        transition(Transition.TRANSITION_ACTIVATE, "activate")
        spin_until(node, lambda: len(received) >= 3, deadline, "messages from the active node")
        transition(Transition.TRANSITION_DEACTIVATE, "deactivate")
        # Nothing may arrive once inactive: let in-flight messages land, then watch.
        settle_end = time.monotonic() + 0.3
        spin_until(node, lambda: time.monotonic() > settle_end, deadline, "settling")
        count_after_deactivate = len(received)
        watch_end = time.monotonic() + 0.5
        spin_until(node, lambda: time.monotonic() > watch_end, deadline, "watching")
        received_while_inactive = len(received) - count_after_deactivate
        transition(Transition.TRANSITION_INACTIVE_SHUTDOWN, "shutdown")
    finally:
        node.destroy_node()
        rclpy.shutdown()
    return {"steps": steps, "received_active": count_after_deactivate,
            "received_while_inactive": received_while_inactive}


# ----------------------------------------------------------------- test

@pytest.mark.ros
def test_lifecycle_transitions_over_change_state_service():
    """configure/activate/deactivate/shutdown succeed over ChangeState, GetState reports
    each new state, and the LifecyclePublisher delivers only while active."""
    name = unique_name("oxygen_lifecycle_test")
    topic = f"/{name}/chatter"
    results = run_peers(__file__, {"node": ["lifecycle_node", name, topic],
                                   "driver": ["driver", name, topic]})

    steps = [(s["transition"], s["success"], s["state"]) for s in results["driver"]["steps"]]
    assert steps == [
        (None, True, "unconfigured"),
        ("configure", True, "inactive"),
        ("activate", True, "active"),
        ("deactivate", True, "inactive"),
        ("shutdown", True, "finalized"),
    ]
    assert results["node"]["transitions"] == ["configure", "activate", "deactivate", "shutdown"]
    assert results["driver"]["received_active"] >= 3
    assert results["driver"]["received_while_inactive"] == 0


if __name__ == "__main__":
    run_as_peer({"lifecycle_node": lifecycle_node, "driver": driver})
