"""Parameter changes recorded in a bag: /parameter_events (rcl_interfaces/msg/ParameterEvent).

Every ROS node publishes an event on /parameter_events whenever its parameters change:
`new_parameters` when it declares them (at its start), `changed_parameters` when a set
request was accepted (a refused one, e.g. outside oxygen_node's changeable_parameters, publishes
nothing), `deleted_parameters` when undeclared. The changes are the `changed_parameters`;
declarations and earlier changes give a later change its old value (None when the bag saw
no earlier value, e.g. the node declared it before the recorder started).
ROS-free: works on rclpy messages and on rosbags' decoded ones alike.
"""
from __future__ import annotations

PARAMETER_EVENTS = "/parameter_events"
PARAMETER_EVENT = "rcl_interfaces/msg/ParameterEvent"
# nodes whose events are not the robot's: `ros2 bag record`'s recorder (oxygen record's own
# node is named in the bag's custom data, bag_recorder.RECORDER_NODE_KEY)
NOT_RECORDED_NODES = ("/rosbag2_recorder",)
MAX_PRINTED = 20   # format_changes: at most this many lines, the rest are in summary.json

# rcl_interfaces/msg/ParameterType -> the ParameterValue field holding that type's value
VALUE_FIELDS = {1: "bool_value", 2: "integer_value", 3: "double_value", 4: "string_value",
                5: "byte_array_value", 6: "bool_array_value", 7: "integer_array_value",
                8: "double_array_value", 9: "string_array_value"}
SCALAR = {"bool_value": bool, "integer_value": int, "double_value": float, "string_value": str}


def _item(x):
    if isinstance(x, bytes):           # rclpy's byte arrays hold 1-byte bytes objects
        return x[0]
    return x.item() if hasattr(x, "item") else x      # numpy scalars (rosbags' arrays)


def parameter_value(value):
    """A ParameterValue as plain Python, by its `type`: bool, int, float, str, a list of
    them (a byte array as a list of ints); None when not set (or of an unknown type)."""
    field = VALUE_FIELDS.get(int(value.type))
    if field is None:
        return None
    v = getattr(value, field)
    return SCALAR[field](v) if field in SCALAR else [_item(x) for x in v]


def parameter_changes(events, skip_nodes=()) -> list[dict]:
    """events: (seconds since the bag's start, ParameterEvent) in the bag's order ->
    [{"t", "node", "name", "old", "new"}] for every changed parameter, skipping the nodes
    in skip_nodes and NOT_RECORDED_NODES."""
    skip = {*skip_nodes, *NOT_RECORDED_NODES}
    seen, out = {}, []
    for t, event in events:
        node = event.node
        if node in skip:
            continue
        for p in event.new_parameters:
            seen[node, p.name] = parameter_value(p.value)
        for p in event.changed_parameters:
            new = parameter_value(p.value)
            out.append({"t": round(t, 3), "node": node, "name": p.name, "old": seen.get((node, p.name)),
                        "new": new})
            seen[node, p.name] = new
        for p in event.deleted_parameters:
            seen.pop((node, p.name), None)
    return out


def format_changes(changes: list[dict]) -> list[str]:
    """The report's lines: one per change (old value `?` where the bag did not see it)."""
    if not changes:
        return ["parameter changes: none"]
    lines = [f"parameter changes: {len(changes)}"]
    for c in changes[:MAX_PRINTED]:
        old = "?" if c["old"] is None else repr(c["old"])
        lines.append(f"  {c['t']:.1f} s {c['node']} {c['name']}: {old} -> {c['new']!r}")
    if len(changes) > MAX_PRINTED:
        lines.append(f"  ... {len(changes) - MAX_PRINTED} more in summary.json")
    return lines
