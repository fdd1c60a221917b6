"""Hostile parameter sets against a running node over DDS: every declared parameter (and
a few undeclared names) set to a value of every type, in every lifecycle state. Each set
is answered (accepted or refused with a reason); the node never logs a traceback; while
active the control loop keeps publishing chunks through the sweep; after the original
values are restored the node cleans up, configures and activates again and acts.

Also the reproduction of the outside review's case: deactivate, cleanup, set a parameter
declared without a value (`action_joint_names`), configure, activate: chunks flow.

Run by pytest; this file is also the driver peer program.
"""
import time

import pytest

from node_harness import start_node  # noqa: F401 - pytest fixture
from ros_helpers import run_as_peer, run_peers

# a value of every parameter type (NOT_SET asks rclpy to undeclare), and values that lie
VALUES = [None, True, 7, -1, 0.5, float("nan"), "", "x", "\x00\x1b[2J" * 100, "y" * 100_000,
          [b"\x01"], [True, False], [1, 2], [0.5, float("inf")], ["a", "b"], [""] * 64]
UNDECLARED = ["no_such_parameter", "robot1.instruction", "qos_overrides./x.publisher.depth"]


def _param_msg(name, value):
    from rcl_interfaces.msg import Parameter as ParameterMsg
    from rcl_interfaces.msg import ParameterType, ParameterValue

    v = ParameterValue()
    if value is None:
        v.type = ParameterType.PARAMETER_NOT_SET
    elif isinstance(value, bool):
        v.type, v.bool_value = ParameterType.PARAMETER_BOOL, value
    elif isinstance(value, int):
        v.type, v.integer_value = ParameterType.PARAMETER_INTEGER, value
    elif isinstance(value, float):
        v.type, v.double_value = ParameterType.PARAMETER_DOUBLE, value
    elif isinstance(value, str):
        v.type, v.string_value = ParameterType.PARAMETER_STRING, value
    elif isinstance(value[0], bytes):
        v.type, v.byte_array_value = ParameterType.PARAMETER_BYTE_ARRAY, value
    elif isinstance(value[0], bool):
        v.type, v.bool_array_value = ParameterType.PARAMETER_BOOL_ARRAY, value
    elif isinstance(value[0], int):
        v.type, v.integer_array_value = ParameterType.PARAMETER_INTEGER_ARRAY, value
    elif isinstance(value[0], float):
        v.type, v.double_array_value = ParameterType.PARAMETER_DOUBLE_ARRAY, value
    else:
        v.type, v.string_array_value = ParameterType.PARAMETER_STRING_ARRAY, value
    return ParameterMsg(name=name, value=v)


def parameter_sweep(namespace, *, deadline):
    from rcl_interfaces.srv import GetParameters, ListParameters, SetParameters

    from node_driver import Driver

    d = Driver(namespace)
    list_client = d.node.create_client(ListParameters, f"{d.fqn}/list_parameters")
    get_client = d.node.create_client(GetParameters, f"{d.fqn}/get_parameters")
    out = {"answered": 0, "accepted": {}, "states": []}
    try:
        d.state(timeout=20.0)
        names = list(d.call(list_client, ListParameters.Request(), 10.0, "list_parameters").result.names)
        # one at a time: rclpy answers an empty list when any asked name has no value
        original = {n: d.call(get_client, GetParameters.Request(names=[n]), 10.0, "get_parameters").values
                    for n in names}
        out["names"] = names

        def set_raw(msg):
            r = d.call(d.param_client, SetParameters.Request(parameters=[msg]), 10.0, f"setting {msg.name}")
            out["answered"] += 1
            return r.results[0]

        def sweep(state):
            accepted = {}                  # name -> the type of the value it took
            for name in [*names, *UNDECLARED]:
                for value in VALUES:
                    msg = _param_msg(name, value)
                    if set_raw(msg).successful:
                        accepted[name] = msg.value.type
            # restore what was accepted; one first declared without a value gets an empty
            # array of its type (static parameters cannot be undeclared; [] reads as unset)
            from rcl_interfaces.msg import Parameter as ParameterMsg
            from rcl_interfaces.msg import ParameterValue
            for name, kind in accepted.items():
                value = original[name][0] if original.get(name) else ParameterValue(type=kind)
                assert set_raw(ParameterMsg(name=name, value=value)).successful, name
            out["accepted"][state] = sorted(accepted)

        sweep("unconfigured")
        out["states"].append(("configure", d.transition("configure")))
        sweep("inactive")
        out["states"].append(("activate", d.transition("activate")))
        d.wait_until(lambda: len(d.chunks) >= 3, 20.0, "chunks before the active sweep")
        t0 = time.monotonic()
        sweep("active")
        out["active_sweep_s"], out["chunks_during_active_sweep"] = time.monotonic() - t0, d.chunks_since(t0)
        # the review's case: a parameter declared without a value, set between cleanup and configure
        for label in ("deactivate", "cleanup"):
            out["states"].append((label, d.transition(label)))
        out["set_action_joint_names"] = d.set_param("action_joint_names", list(d.joints))[0]
        for label in ("configure", "activate"):
            out["states"].append((label, d.transition(label)))
        t1 = time.monotonic()
        d.wait_until(lambda: d.chunks_since(t1) >= 5, 20.0, "chunks after the sweep and a reconfigure")
        out["chunks_after"] = d.chunks_since(t1)
        return out
    finally:
        d.close()


@pytest.mark.ros
def test_parameter_sets_of_every_name_type_and_state_are_answered_and_harmless(start_node):
    """Every declared parameter and a few undeclared names, each set to a value of every
    parameter type (NaN, inf, control bytes, 100 kB strings, NOT_SET) while unconfigured,
    inactive and active: every set is answered; configure-time parameters are accepted only
    while unconfigured; nothing is undeclared; chunks flow through the active sweep; and
    after the sweep plus a set of action_joint_names between cleanup and configure, the
    node configures, activates and acts, with no traceback in its log."""
    node = start_node()
    r = run_peers(__file__, {"driver": ["parameter_sweep", node.namespace]}, timeout=600)["driver"]
    assert node.alive(), node.log()[-3000:]
    assert all(ok for _, ok in r["states"]), r["states"]
    n = len(r["names"]) + len(UNDECLARED)
    assert r["answered"] >= 3 * n * len(VALUES), r["answered"]
    assert not set(r["accepted"]["active"]) & {"model", "joint_names", "action_upper_limits", "checkpoint"}
    assert {"model", "action_joint_names"} <= set(r["accepted"]["unconfigured"]), r["accepted"]
    assert not set(UNDECLARED) & set().union(*r["accepted"].values())
    assert r["chunks_during_active_sweep"] >= 2, r
    assert r["set_action_joint_names"] is True
    assert r["chunks_after"] >= 5
    log = node.log()
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]


if __name__ == "__main__":
    run_as_peer({"parameter_sweep": parameter_sweep})
