"""oxygen_node with a TEST-INJECTED FAULT in one fleet robot (a labelled test double for one
thing only: a robot whose policy I/O or publishers raise).

Robot $OXYGEN_TEST_FAULTY_ROBOT raises InjectedFault on every 5th of its frames (counted
by its observations), the kinds in turn: its policy I/O making the observation, its policy
I/O converting the chunk, its trajectory publisher, its narration publisher, its
FrameTiming publisher. Everything else is the real node over real DDS.

    OXYGEN_TEST_FAULTY_ROBOT=arm2 python test/fleet_fault_node.py --ros-args ...
"""
import os
import sys

from oxygen_ros.node import frame_loop

ROBOT = os.environ["OXYGEN_TEST_FAULTY_ROBOT"]
EVERY = 5
KINDS = ("observation", "actions", "trajectory", "narration", "timing")


class InjectedFault(RuntimeError):
    """The test's own fault, not the node's."""


def inject(rt) -> None:
    """Wrap the robot's policy I/O and publishers (once per configure: rt is new then)."""
    if getattr(rt, "_injected", False):
        return
    rt._injected = True
    state = {"frame": 0, "kind": None}
    policy = rt.policy
    observation, actions = policy.observation, policy.actions

    def faulty_observation(*args, **kwargs):
        state["frame"] += 1
        n = state["frame"]
        state["kind"] = KINDS[(n // EVERY - 1) % len(KINDS)] if n % EVERY == 0 else None
        if state["kind"] == "observation":
            raise InjectedFault(f"injected fault in the observation (frame {n})")
        return observation(*args, **kwargs)

    def faulty_actions(*args, **kwargs):
        if state["kind"] == "actions":
            raise InjectedFault(f"injected fault in the actions (frame {state['frame']})")
        return actions(*args, **kwargs)

    policy.observation, policy.actions = faulty_observation, faulty_actions
    for kind in ("trajectory", "narration", "timing"):
        pub = rt.pubs[kind]

        def faulty_publish(msg, publish=pub.publish, kind=kind):
            if state["kind"] == kind:
                state["kind"] = None         # once a frame
                raise InjectedFault(f"injected fault publishing {kind} (frame {state['frame']})")
            return publish(msg)

        pub.publish = faulty_publish


_init = frame_loop.FrameLoop.__init__


def _faulty_init(self, serving, *args, **kwargs):
    _init(self, serving, *args, **kwargs)
    inject(serving.robots[ROBOT])


frame_loop.FrameLoop.__init__ = _faulty_init

from oxygen_ros.node.oxygen_node import main  # noqa: E402 - after the injection

sys.exit(main())
