"""An SROS2 access-control policy (sros2's policy format, version 0.2.0) for oxygen_node as
a params file configures it, and for the two kinds of participant around it.

Three kinds of enclave:
- /oxygen/node: the node itself: its camera and joint-state subscriptions, every
  trajectory topic (further experts' included), text, timing, diagnostics, its lifecycle
  and parameter services, ask_progress, and what every ROS node uses (rosout,
  parameter_events). A fleet's robots' topics and ask_progress services are under their
  namespaces; one profile per node namespace (--namespace given several times: one node
  each).
- /oxygen/operator: may ask questions, drive the lifecycle and set parameters (the
  `instruction` among them), and read every output topic.
- /oxygen/robot/<ROBOT> (a fleet: one per robot; else /oxygen/robot): the robot's drivers
  publish its cameras and joint states and subscribe to its trajectories.

Every name is written absolute (resolved as the node resolves it), so nothing depends on
the profile's namespace. The node's interfaces are computed here from the parameters and
the model profile's config (no weights are loaded); test/test_security_policy.py checks
them against a running node's graph.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

LIFECYCLE_SERVICES = ("change_state", "get_state", "get_available_states", "get_available_transitions",
                      "get_transition_graph")
PARAMETER_SERVICES = ("describe_parameters", "get_parameter_types", "get_parameters", "list_parameters",
                      "set_parameters", "set_parameters_atomically", "get_type_description")
OUTPUT_TOPICS = ("trajectory_topic", "frame_timing_topic", "narration_topic", "memory_topic", "answer_topic")
NODE_ENCLAVE, OPERATOR_ENCLAVE, ROBOT_ENCLAVE = "/oxygen/node", "/oxygen/operator", "/oxygen/robot"


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


def node_interfaces(params: dict, namespace: str = "/", node: str = "oxygen_node") -> NodeInterfaces:
    """What oxygen_node opens once configured with `params` (a params file's values)."""
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


def policy_xml(nodes: list[NodeInterfaces]) -> str:
    """The policy document for these nodes (one per namespace), their operator and robots."""
    policy = ET.Element("policy", version="0.2.0")
    enclaves = ET.SubElement(policy, "enclaves")
    profiles = _enclave(enclaves, NODE_ENCLAVE)
    for n in nodes:
        _profile(profiles, n.namespace, n.node, publish=n.publish, subscribe=n.subscribe, reply=n.reply)
    operator_reads = [t for n in nodes for r in n.robots for t in r.trajectories + r.outputs]
    operator_reads += ["/diagnostics", "/rosout", "/parameter_events",
                       *(f"{n.fqn}/transition_event" for n in nodes)]
    _profile(_enclave(enclaves, OPERATOR_ENCLAVE), "/", "oxygen_operator",
             publish=["/rosout", "/parameter_events"], subscribe=list(dict.fromkeys(operator_reads)),
             request=[s for n in nodes for s in n.reply])
    robots = [r for n in nodes for r in n.robots]
    for r in robots:
        fleet = len(robots) > 1 or r.namespace != nodes[0].namespace
        path = f"{ROBOT_ENCLAVE}/{r.namespace.strip('/')}" if fleet and r.namespace.strip("/") else ROBOT_ENCLAVE
        _profile(_enclave(enclaves, path), r.namespace, "robot_drivers",
                 publish=[*r.inputs, "/rosout", "/parameter_events"],
                 subscribe=[*r.trajectories, "/parameter_events"])
    ET.indent(policy)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(policy, encoding="unicode") + "\n"
