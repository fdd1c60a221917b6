"""An SROS2 access-control policy (sros2's policy format, version 0.2.0) for oxygen_node as
it will run (its params file, the launch overrides and remap rules), and for the
participants around it.

Four kinds of enclave:
- /oxygen/node: the node itself: its camera and joint-state subscriptions, every
  trajectory topic (further experts' included), text, timing, diagnostics, its lifecycle
  and parameter services, ask_progress, and what every ROS node uses (rosout,
  parameter_events). A fleet's robots' topics and ask_progress services are under their
  namespaces; one profile per node namespace (--namespace given several times: one node
  each). The only enclave besides the operator's that may publish /parameter_events, the
  audit trail `oxygen report` reads.
- /oxygen/operator: `ros2 service call` (ros2service's requester node, one name per
  service type): may ask questions, drive the lifecycle and set parameters (the
  `instruction` among them), and read every output topic. It may publish
  /parameter_events only because stock ros2cli cannot be kept from it (see TOOL_EVENTS).
- /oxygen/recorder: `oxygen record`: reads the outputs, /parameter_events and the inputs.
- /oxygen/robot/<ROBOT> (a fleet: one per robot; else /oxygen/robot): the robot's drivers,
  `oxygen sim` and `oxygen play`, publish its cameras and joint states and subscribe to its
  trajectories.

Each process's own ROS internals are in its enclave too: its parameter services and
Jazzy's ~/get_type_description (every rclpy node serves them), /rosout, and its parameter
events. Every name is written absolute (resolved as the node resolves it, remap rules
applied), so nothing depends on the profile's namespace. The node's interfaces are computed
here from the parameters and the model profile's config (no weights are loaded);
test/test_security_policy.py checks every enclave against the live graph of the processes
that use it.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

# every service the node serves, with its type (ros2service names its requester after the type)
LIFECYCLE_SERVICES = {"change_state": "lifecycle_msgs/ChangeState", "get_state": "lifecycle_msgs/GetState",
                      "get_available_states": "lifecycle_msgs/GetAvailableStates",
                      "get_available_transitions": "lifecycle_msgs/GetAvailableTransitions",
                      "get_transition_graph": "lifecycle_msgs/GetAvailableTransitions"}
PARAMETER_SERVICES = {"describe_parameters": "rcl_interfaces/DescribeParameters",
                      "get_parameter_types": "rcl_interfaces/GetParameterTypes",
                      "get_parameters": "rcl_interfaces/GetParameters",
                      "list_parameters": "rcl_interfaces/ListParameters",
                      "set_parameters": "rcl_interfaces/SetParameters",
                      "set_parameters_atomically": "rcl_interfaces/SetParametersAtomically",
                      "get_type_description": "type_description_interfaces/GetTypeDescription"}
ASK_PROGRESS_TYPE = "oxygen_msgs/AskProgress"
OUTPUT_TOPICS = ("trajectory_topic", "frame_timing_topic", "narration_topic", "memory_topic", "answer_topic")
NODE_ENCLAVE, OPERATOR_ENCLAVE, ROBOT_ENCLAVE = "/oxygen/node", "/oxygen/operator", "/oxygen/robot"
RECORDER_ENCLAVE = "/oxygen/recorder"
PARAMETER_EVENTS = "/parameter_events"
# Where oxygen sim/play/record publish their own parameter events (tool_node): rclpy (Jazzy)
# gives every node a /parameter_events publisher, with no switch (rclcpp has
# start_parameter_event_publisher), and under Enforce creating it needs the permission; so
# the project's tools move theirs to their private namespace and only the node's enclave
# (and stock ros2cli's, which takes no remap rules) keeps /parameter_events.
TOOL_EVENTS = "parameter_events"
SIM_NODE, PLAYER_NODE = "oxygen_sim", "oxygen_player"     # the recorder's: BagRecorder.NODE_NAME
REQUESTER_PREFIX = "_ros2cli_requester_"      # ros2service call: rclpy node _ros2cli_requester_<pkg>_<Srv>


def tool_node(name: str, namespace: str | None = None):
    """An rclpy node for oxygen sim/play/record whose own parameter events go to
    ~/parameter_events, not /parameter_events (TOOL_EVENTS says why). rclpy's Node creates
    that publisher first thing in its constructor through create_publisher, which this
    subclass redirects once; the live-graph test checks it still does."""
    from rclpy.node import Node

    class ToolNode(Node):
        def create_publisher(self, msg_type, topic, *args, **kwargs):
            if topic == PARAMETER_EVENTS and not getattr(self, "_events_moved", False):
                self._events_moved = True
                topic = f"~/{TOOL_EVENTS}"
            return super().create_publisher(msg_type, topic, *args, **kwargs)

    return ToolNode(name, namespace=namespace)


def apply_overrides(params: dict, robots: str | None = None, sets: list[str] = ()) -> dict:
    """The params file's values with what launch or the command line changes: robots:=
    ("a,b", fleet.launch.py's argument) and -p NAME:=VALUE (rcl's syntax, the value read
    as YAML; ROBOT.NAME sets one fleet robot's own value)."""
    import yaml

    params = dict(params)
    for item in sets:
        name, sep, text = item.partition(":=")
        if not sep or not name:
            raise ValueError(f"-p {item!r}: expected NAME:=VALUE")
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError as e:
            raise ValueError(f"-p {item!r}: {e}") from None
        robot, dot, key = name.partition(".")
        if dot:
            params[robot] = {**params.get(robot, {}), key: value}
        else:
            params[name] = value
    if robots is not None:
        params["robots"] = [r.strip().strip("/") for r in robots.split(",") if r.strip()]
    return params


def _expand(name: str, namespace: str, node: str) -> str:
    """A name as rcl expands it for node `node` in `namespace` (~, relative, absolute)."""
    ns = namespace.rstrip("/")
    if name.startswith("~"):
        return f"{ns}/{node}{name[1:]}"
    return name if name.startswith("/") else f"{ns}/{name}"


def remapper(rules: list[str], namespace: str, node: str):
    """rcl's remap rules ([NODE:]FROM:=TO, rostopic:// or rosservice:// to limit the kind)
    as a function (name, is_service) -> the name the node uses; the first match wins."""
    parsed = []
    for rule in rules:
        lhs, sep, to = rule.partition(":=")
        if not sep or not lhs or not to:
            raise ValueError(f"-r {rule!r}: expected FROM:=TO")
        kind = None
        for scheme in ("rostopic://", "rosservice://"):
            if lhs.startswith(scheme):
                kind, lhs = scheme[3:-3], lhs[len(scheme):]
        target, colon, source = lhs.rpartition(":")
        if colon and target != node:
            continue                                # another node's rule
        if source.startswith("__"):                 # __ns, __node: the node's own identity
            raise ValueError(f"-r {rule!r}: give the namespace with --namespace and the name with --node")
        parsed.append((kind, _expand(source, namespace, node), _expand(to, namespace, node)))

    def remap(name: str, service: bool = False) -> str:
        for kind, source, to in parsed:
            if source == name and kind in (None, "service" if service else "topic"):
                return to
        return name
    return remap


@dataclass
class RobotTopics:
    """One robot's side of the node: what its drivers publish and what they follow."""
    namespace: str
    inputs: list[str] = field(default_factory=list)         # cameras, joint states (the node subscribes)
    trajectories: list[str] = field(default_factory=list)   # every expert's (the node publishes)
    outputs: list[str] = field(default_factory=list)        # text, timing, camera views
    ask_progress: str = ""


@dataclass
class NodeInterfaces:
    namespace: str
    node: str
    robots: list[RobotTopics]
    publish: list[str] = field(default_factory=list)
    subscribe: list[str] = field(default_factory=list)
    reply: list[str] = field(default_factory=list)           # the services it serves
    types: dict[str, str] = field(default_factory=dict)      # service (as served) -> its type

    @property
    def fqn(self) -> str:
        return f"{self.namespace.rstrip('/')}/{self.node}"


def _model_config(model: str):
    """The profile's config; for a profile sized by its checkpoint (pi05, xr0), a sibling
    profile's: the camera slots are the family's, and only fixed-size multi-expert
    profiles have further experts."""
    from ..engine.registry import family, family_of, get_config

    try:
        return get_config(model)
    except ValueError:
        return next(iter(family(family_of(model).name).PROFILES.values()))


def node_interfaces(params: dict, namespace: str = "/", node: str = "oxygen_node",
                    remaps: list[str] = ()) -> NodeInterfaces:
    """What oxygen_node opens once configured with `params` (a params file's values, launch
    overrides applied) and started with the remap rules `remaps`."""
    from ..node.expert_outputs import expert_topic
    from ..node.params import SPEC
    from ..node.topic_names import node_topic, robot_topic
    from .params_files import robot_params

    def value(p: dict, name: str):
        return p.get(name, SPEC[name].default)

    namespace = "/" + namespace.strip("/")
    cfg = _model_config(value(params, "model"))
    out = NodeInterfaces(namespace, node, [])
    fqn = out.fqn
    for robot in params.get("robots") or [""]:
        p = robot_params(params, robot)
        resolve = (lambda t, r=robot: robot_topic(r, node, t)) if robot else (lambda t: node_topic(namespace, node, t))
        cameras = list(value(p, "camera_topics"))
        experts = [expert_topic(e.name, list(value(p, "expert_trajectory_topics")), i)
                   for i, e in enumerate(cfg.extra_experts)]
        r = RobotTopics(f"/{robot}" if robot else namespace,
                        inputs=[resolve(t) for t in [*cameras, value(p, "joint_state_topic")]],
                        trajectories=[resolve(t) for t in [value(p, "trajectory_topic"), *experts]],
                        outputs=[resolve(value(p, k)) for k in OUTPUT_TOPICS[1:]],
                        ask_progress=f"/{robot}/ask_progress" if robot else f"{fqn}/ask_progress")
        if value(p, "publish_camera_views"):
            r.outputs += [resolve(f"~/camera_view/{slot}") for slot in cfg.camera_slots[: len(cameras)]]
        out.robots.append(r)
        out.publish += r.trajectories + r.outputs
        out.subscribe += r.inputs
        out.reply.append(r.ask_progress)
    out.publish += ["/diagnostics", "/rosout", "/parameter_events", f"{fqn}/transition_event"]
    if params.get("use_sim_time"):
        out.subscribe.append("/clock")
    out.reply += [f"{fqn}/{s}" for s in (*LIFECYCLE_SERVICES, *PARAMETER_SERVICES)]
    out.types = {r.ask_progress: ASK_PROGRESS_TYPE for r in out.robots}
    out.types |= {f"{fqn}/{s}": t for s, t in (LIFECYCLE_SERVICES | PARAMETER_SERVICES).items()}
    remap = remapper(list(remaps), namespace, node)
    for r in out.robots:
        r.inputs, r.trajectories, r.outputs = ([remap(t) for t in ts] for ts in (r.inputs, r.trajectories, r.outputs))
        r.ask_progress = remap(r.ask_progress, service=True)
    out.publish, out.subscribe = [remap(t) for t in out.publish], [remap(t) for t in out.subscribe]
    out.reply = [remap(s, service=True) for s in out.reply]
    out.types = {remap(s, service=True): t for s, t in out.types.items()}
    for name in ("publish", "subscribe", "reply"):
        setattr(out, name, list(dict.fromkeys(getattr(out, name))))
    return out


def _profile(parent, ns: str, node: str, publish=(), subscribe=(), reply=(), request=()) -> None:
    profile = ET.SubElement(parent, "profile", ns=ns, node=node)
    for kind, verb, names in (("topics", "publish", publish), ("topics", "subscribe", subscribe),
                              ("services", "reply", reply), ("services", "request", request)):
        if names:
            group = ET.SubElement(profile, kind, {verb: "ALLOW"})
            for name in names:
                ET.SubElement(group, kind[:-1]).text = name


def _enclave(root, path: str):
    return ET.SubElement(ET.SubElement(root, "enclave", path=path), "profiles")


def _tool(profiles, ns: str, node: str, publish=(), subscribe=(), request=(), events: str | None = None) -> None:
    """A profile for one process's node: what it uses, plus what rclpy opens for every node:
    /rosout, its parameter events (`events`, default its private TOOL_EVENTS), its parameter
    services and ~/get_type_description."""
    fqn = f"{ns.rstrip('/')}/{node}"
    _profile(profiles, ns, node, publish=list(dict.fromkeys([*publish, "/rosout", events or f"{fqn}/{TOOL_EVENTS}"])),
             subscribe=list(dict.fromkeys(subscribe)), reply=[f"{fqn}/{s}" for s in PARAMETER_SERVICES],
             request=list(dict.fromkeys(request)))


def policy_xml(nodes: list[NodeInterfaces]) -> str:
    """The policy document for these nodes (one per namespace), their operator, recorder
    and robots."""
    policy = ET.Element("policy", version="0.2.0")
    enclaves = ET.SubElement(policy, "enclaves")
    profiles = _enclave(enclaves, NODE_ENCLAVE)
    for n in nodes:
        _profile(profiles, n.namespace, n.node, publish=n.publish, subscribe=n.subscribe, reply=n.reply)
    outputs = [t for n in nodes for r in n.robots for t in r.trajectories + r.outputs]
    operator_reads = [*outputs, "/diagnostics", "/rosout", PARAMETER_EVENTS,
                      *(f"{n.fqn}/transition_event" for n in nodes)]
    # `ros2 service call SERVICE TYPE`: one rclpy node per service type, which always
    # publishes /parameter_events (ros2cli passes it no remap rules)
    operator = _enclave(enclaves, OPERATOR_ENCLAVE)
    calls = {}
    for n in nodes:
        for service in n.reply:
            calls.setdefault(n.types.get(service, ""), []).append(service)
    for i, (srv_type, services) in enumerate((t, s) for t, s in calls.items() if t):
        package, name = srv_type.split("/")
        # the reads once: DDS permissions are the enclave's, whichever profile lists them
        _tool(operator, "/", f"{REQUESTER_PREFIX}{package}_{name}", subscribe=operator_reads if i == 0 else (),
              request=services, events=PARAMETER_EVENTS)
    # oxygen record: outputs, the audit trail and (--cameras) the inputs; never writes the trail
    from .bag_recorder import GROUND_TRUTH, BagRecorder, resolve

    recorder = _enclave(enclaves, RECORDER_ENCLAVE)
    for n in nodes:
        inputs = [t for r in n.robots for t in r.inputs]
        truth = [resolve(GROUND_TRUTH, r.namespace) for r in n.robots]     # the sim's /tf
        _tool(recorder, n.namespace, BagRecorder.NODE_NAME,
              subscribe=[*outputs, *inputs, *truth, "/diagnostics", PARAMETER_EVENTS])
    robots = [r for n in nodes for r in n.robots]
    for r in robots:
        fleet = len(robots) > 1 or r.namespace != nodes[0].namespace
        path = f"{ROBOT_ENCLAVE}/{r.namespace.strip('/')}" if fleet and r.namespace.strip("/") else ROBOT_ENCLAVE
        drivers = _enclave(enclaves, path)
        _profile(drivers, r.namespace, "robot_drivers", publish=[*r.inputs, "/rosout"], subscribe=r.trajectories)
        # oxygen sim (in the robot's namespace) and oxygen play (--namespace prefixes the bag's topics)
        _tool(drivers, r.namespace, SIM_NODE, publish=[*r.inputs, resolve(GROUND_TRUTH, r.namespace)],
              subscribe=r.trajectories)
        _tool(drivers, "/", PLAYER_NODE, publish=r.inputs)
    ET.indent(policy)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(policy, encoding="unicode") + "\n"

