"""The oxygen_node parameters: declarations with descriptors, and typed reads.

Each parameter has a `when`:
  "start"     read once when the process starts (descriptor read_only);
  "configure" read by on_configure; it can change only while the node is unconfigured
              (the node rejects a change otherwise: cleanup, set, configure again);
  "live"      read every control frame; changes apply at once.
A parameter declared with a type instead of a default has no default and must come
from the params file (robot-specific: joint names and limits).
"""
from __future__ import annotations

import array
import re
from dataclasses import dataclass

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.parameter import Parameter

from ..engine import prompts   # model-agnostic defaults; params files set a profile's prompts
from .joint_space import JointSpace

@dataclass(frozen=True)
class Spec:
    name: str
    default: object            # a value, or a Parameter.Type for "no default"
    when: str                  # "start" | "configure" | "live"
    description: str
    range: tuple | None = None  # (low, high) inclusive
    required: bool = True       # False: an array with no default reads as [] when unset


SPECS = [
    # -- process -------------------------------------------------------------------------
    Spec("autostart", False, "start", "Configure and activate right after start."),
    Spec("robots", Parameter.Type.STRING_ARRAY, "start",
         "Fleet mode: the robots this node serves, one name each (also its namespace: /NAME/ "
         "holds its topics and its ask_progress service); NAME.<parameter> overrides a shared "
         "parameter for that robot. Empty: one robot in the node's own namespace.", required=False),
    Spec("changeable_parameters", Parameter.Type.STRING_ARRAY, "start",
         "The robot's allow-list: when set, only these parameters may change while the node runs "
         "(e.g. instruction); a set request for any other one (use_sim_time included) is refused "
         "with the reason, in every lifecycle state. NAME allows it for every fleet robot, "
         "ROBOT.NAME for one. Empty: every parameter may change under its [start] / [configure] / "
         "[live] rule (development profiles). Accepted changes are logged with their old and new "
         "values either way.", required=False),
    Spec("max_concurrent_questions", 4, "start",
         "Progress questions decoded or waiting at once; more get an unsuccessful response. "
         "Also sizes the executor's thread pool.", (1, 64)),
    # -- model and engine --------------------------------------------------------------
    Spec("model", "tiny", "configure", "Model profile: tiny | smol | pi05 | pi05-quarter | qwen3vl-tiny | xr0-cpu | xr0 | starvla-pi | starvla-cpu | qwen3vl-multi-tiny | qwen3vl-multi-cpu."),
    Spec("checkpoint", "", "configure", "Weights file or directory; empty: the profile's default."),
    Spec("tokenizer_path", "", "configure", "Tokenizer file; empty: the profile's default."),
    Spec("dtype", "float32", "configure", "Weight and KV dtype: float32 | bfloat16 | float16."),
    Spec("device", "cpu", "configure", "torch device, e.g. cpu or cuda:0."),
    Spec("cuda_graphs", True, "configure",
         "On CUDA, replay the prefill, action chunk and batched decode step from CUDA graphs (ignored on CPU)."),
    Spec("torch_threads", 1, "configure", "torch intra-op threads; 0 = torch's default.", (0, 256)),
    Spec("seed", 0, "configure", "Seed of the action noise.", (0, 2**31 - 1)),
    Spec("max_requests", 4, "configure",
         "KV pool slots: language requests decoding at once (the pool is allocated at configure).",
         (1, 256)),
    Spec("max_queue", 8, "configure", "Language requests waiting for a KV slot; more are rejected.",
         (0, 1024)),
    Spec("max_new_tokens", 32, "configure", "Upper bound of tokens per language request.", (1, 4096)),
    Spec("steps_per_frame", 4, "configure",
         "Decode budget k: batched decode steps per control frame; 0 = fit the control period.",
         (0, 1024)),
    # -- control loop --------------------------------------------------------------------
    Spec("control_rate_hz", 10.0, "configure",
         "Replanning rate: control frames (new chunks) per second. The node measures its frames "
         "at start and warns when this rate cannot be held.", (0.1, 1000.0)),
    Spec("replanning", "rate", "configure",
         "rate: a frame every 1 / control_rate_hz | asap: the next frame starts as soon as the "
         "last one ends (as fast as the hardware allows; control_rate_hz then only sets the "
         "automatic decode budget)."),
    Spec("action_rate_hz", 0.0, "configure",
         "Rate of the checkpoint's actions (its training data's, e.g. 50 for DROID/ALOHA-style "
         "data, 10-20 for LIBERO): trajectory points are 1 / action_rate_hz apart. 0: what the "
         "checkpoint's files say (configure fails when they say nothing). Never the replanning "
         "rate.", (0.0, 10000.0)),
    Spec("trajectory_velocities", False, "live",
         "Send point velocities (finite differences, the last one zero): a "
         "joint_trajectory_controller then interpolates cubically instead of linearly."),
    Spec("rtc_mode", "off", "configure",
         "Real-Time Chunking: off | guided (training-free: each chunk is guided to continue what "
         "the robot executes of the previous one while it is inferred) | trained (hard "
         "inpainting of that prefix, for checkpoints trained for it)."),
    Spec("rtc_schedule", "exp", "configure",
         "RTC soft mask over the guided steps after the delay: exp | linear | ones | zeros."),
    Spec("rtc_beta", 10.0, "configure", "RTC maximum guidance weight (beta).", (0.0, 1000.0)),
    Spec("rtc_execution_horizon", 10, "configure",
         "RTC: chunk steps guided toward the previous chunk, counted from the new chunk's start "
         "(LeRobot's execution_horizon: the end of the soft mask).", (1, 10000)),
    Spec("max_observation_age_s", 0.5, "live",
         "No action chunk from an observation older than this (seconds).", (0.001, 3600.0)),
    Spec("instruction", "pick up the cube", "live", "Task instruction in the model's prefix."),
    # -- robot interface -------------------------------------------------------------------
    Spec("camera_topics", ["camera/base/image_raw"], "configure",
         "sensor_msgs/Image topics, mapped in order to the model's camera slots "
         "(fewer topics than slots: the remaining slots are masked)."),
    # per camera, in camera_topics order; shorter lists leave the rest at the default
    Spec("camera_transports", ["auto"], "configure",
         "Per camera: raw (sensor_msgs/Image) | compressed (sensor_msgs/CompressedImage, JPEG or "
         "PNG) | auto (compressed when the topic ends in /compressed, image_transport's convention)."),
    Spec("camera_crops", [0, 0, 0, 0], "configure",
         "Per camera 4 numbers x, y, width, height: crop box in the published image's pixels, "
         "applied first (0, 0, 0, 0 = whole image)."),
    Spec("camera_rotations", [0], "configure",
         "Per camera: rotate 0 | 90 | 180 | 270 degrees counter-clockwise after the crop, before "
         "the model's resize, to match the training data's view (openpi's LIBERO rotates 180)."),
    Spec("camera_flips", ["none"], "configure",
         "Per camera: none | horizontal | vertical | both, after the rotation."),
    Spec("publish_camera_views", False, "configure",
         "Publish each frame's camera images as the model gets them (decoded and transformed, "
         "before its resize) on ~/camera_view/<slot> (sensor_msgs/Image rgb8), to check a view."),
    Spec("joint_state_topic", "joint_states", "configure", "sensor_msgs/JointState topic."),
    Spec("joint_names", Parameter.Type.STRING_ARRAY, "configure",
         "Joints of the state and the trajectory, matched by name in joint states (any order)."),
    Spec("joint_lower_limits", Parameter.Type.DOUBLE_ARRAY, "configure",
         "Per joint lower limit: the safety envelope of published positions (and -1 of the "
         "`limits` convention's normalisation)."),
    Spec("joint_upper_limits", Parameter.Type.DOUBLE_ARRAY, "configure",
         "Per joint upper limit: the safety envelope of published positions (and +1 of the "
         "`limits` convention's normalisation)."),
    Spec("action_joint_names", Parameter.Type.STRING_ARRAY, "configure",
         "Joints the action dimensions drive, in order, when they differ from joint_names "
         "(grippers, hands); empty: joint_names.", required=False),
    Spec("action_lower_limits", Parameter.Type.DOUBLE_ARRAY, "configure",
         "Lower limits of action_joint_names; empty: their joint_lower_limits.", required=False),
    Spec("action_upper_limits", Parameter.Type.DOUBLE_ARRAY, "configure",
         "Upper limits of action_joint_names; empty: their joint_upper_limits.", required=False),
    Spec("trajectory_topic", "joint_trajectory", "configure",
         "trajectory_msgs/JointTrajectory output: one action chunk per frame."),
    # a model with several action experts on one prefix (qwen3vl-multi-*): the further
    # experts' outputs, in the model's order (node/expert_outputs.py)
    Spec("expert_trajectory_topics", Parameter.Type.STRING_ARRAY, "configure",
         "Per further action expert: its JointTrajectory topic; empty or missing: "
         "joint_trajectory/<expert name>.", required=False),
    Spec("expert_joint_names", Parameter.Type.STRING_ARRAY, "configure",
         "Per further action expert: the joints it drives, comma-separated (one entry per "
         "expert; empty for a one-expert model).", required=False),
    Spec("expert_joint_lower_limits", Parameter.Type.DOUBLE_ARRAY, "configure",
         "Every further expert's joint lower limits, one expert after the other.", required=False),
    Spec("expert_joint_upper_limits", Parameter.Type.DOUBLE_ARRAY, "configure",
         "Every further expert's joint upper limits, one expert after the other.", required=False),
    Spec("expert_action_rates_hz", Parameter.Type.DOUBLE_ARRAY, "configure",
         "Per further action expert: the rate of its chunk's points (0 or missing: the first "
         "expert's action rate).", required=False),
    Spec("expert_action_statistics", Parameter.Type.STRING_ARRAY, "configure",
         "Per further action expert: its action statistics file (openpi norm_stats.json or "
         "LeRobot normalizer .safetensors); empty or missing: its joint limits are its action "
         "space.", required=False),
    Spec("expert_action_normalizations", Parameter.Type.STRING_ARRAY, "configure",
         "Per further action expert with statistics: quantile (empty or missing) or mean_std.",
         required=False),
    Spec("frame_timing_topic", "frame_timing", "configure", "oxygen_msgs/FrameTiming output."),
    Spec("await_recorders", Parameter.Type.STRING_ARRAY, "configure",
         "Recorder nodes (e.g. oxygen_recorder; relative names live in the robot's namespace) "
         "that must subscribe to every output topic (trajectories, frame timing, text, "
         "/diagnostics) before an activation's first frame, so their bags hold every frame; "
         "no robot of the node moves until they do. Empty: start at once.", required=False),
    Spec("narration_topic", "narration", "configure", "TextChunk stream of narrations."),
    Spec("memory_topic", "memory", "configure", "TextChunk stream of memory entries (transient-local)."),
    Spec("answer_topic", "answer", "configure", "TextChunk stream of answers to progress questions."),
    # -- policy I/O (each family's processor.py, engine/policy_io; docs/pi05.md) -------------
    Spec("policy_io", "auto", "configure",
         "Robot <-> model conventions: auto (pi05 checkpoints: their own, openpi or lerobot; "
         "an xr0 checkpoint: xr0; otherwise limits) | limits | openpi | lerobot | xr0 "
         "(Xiaomi-Robotics-0's deploy path: raw state, the checkpoint's per-robot-type action "
         "statistics and mask, its prompt)."),
    Spec("robot_type", "", "configure",
         "policy_io xr0: the robot type of the checkpoint's action statistics "
         "(processor_config.json action_config keys, e.g. libero_all; `oxygen checkpoint DIR` "
         "or a failed configure lists them); it sets the action dims, mask and chunk horizon. "
         "policy_io starvla: the dataset_statistics.json key (e.g. oxe_bridge). "
         "Empty: the checkpoint's only type (configure fails when it has several).",
         required=False),   # not yet written in tiny/demo/humanoid_thor.yaml (xr0_thor.yaml sets it)
    Spec("norm_stats_path", "", "configure",
         "Statistics file used instead of the checkpoint's: openpi norm_stats.json or LeRobot "
         "normalizer .safetensors (policy_io xr0: a JSON action_config); empty: the checkpoint's own."),
    Spec("asset_id", "", "configure", "openpi asset folder under assets/; empty: the checkpoint's."),
    Spec("normalization", "", "configure",
         "quantile | mean_std | none; empty: what the checkpoint says (pi0.5: quantile)."),
    Spec("state_in_prompt", "auto", "configure",
         "Discretised state in the prompt: auto (the checkpoint's config) | true | false."),
    Spec("action_dims", 0, "configure",
         "Action dimensions the robot uses (the first N of the model's); 0: the checkpoint's.",
         (0, 1024)),
    Spec("delta_action_mask", Parameter.Type.BOOL_ARRAY, "configure",
         "Per action dimension: true = the model predicts a delta from the state (made "
         "absolute before publishing); empty: all absolute.", required=False),
    Spec("chunk_points", 0, "live",
         "Points of each action chunk published; 0: the whole chunk (the checkpoint's horizon).",
         (0, 10000)),
    # -- language --------------------------------------------------------------------------
    Spec("narration_every_n_frames", 10, "live", "Start a narration every N frames; 0 = off.",
         (0, 1_000_000)),
    Spec("memory_every_n_frames", 50, "live", "Start a memory entry every N frames; 0 = off.",
         (0, 1_000_000)),
    Spec("narration_prompt", prompts.NARRATION, "live",
         "Prompt of narration requests."),
    Spec("memory_prompt", prompts.MEMORY, "live",
         "Prompt of memory requests."),
    Spec("answer_prompt", prompts.ANSWER, "live",
         "Template of progress answers; {memory} becomes the memory log, {question} the question."),
    Spec("narration_max_tokens", 16, "live", "Tokens per narration (<= max_new_tokens).", (1, 4096)),
    Spec("memory_max_tokens", 16, "live", "Tokens per memory entry (<= max_new_tokens).", (1, 4096)),
    Spec("answer_max_tokens", 32, "live", "Tokens per answer (<= max_new_tokens).", (1, 4096)),
    Spec("memory_log_size", 8, "configure", "Memory entries kept (most recent).", (1, 1000)),
    Spec("question_timeout_s", 30.0, "live",
         "Default wait for an answer when the request's timeout_s is 0.", (0.1, 3600.0)),
    # -- diagnostics -----------------------------------------------------------------------
    Spec("diagnostics_period_s", 1.0, "configure", "Period of /diagnostics.", (0.1, 60.0)),
    Spec("input_problem_hold_s", 3.0, "configure",
         "How long a rejected input message stays reported in diagnostics.", (0.0, 3600.0)),
]
SPEC = {s.name: s for s in SPECS}


# What a fleet's robots share: the process, the model and engine, the frame cadence.
# Every other parameter can be set per robot, as ROBOT.NAME (see `read`).
FLEET_SHARED = {"robots", "autostart", "max_concurrent_questions", "model", "checkpoint", "tokenizer_path",
                "dtype", "device", "cuda_graphs", "torch_threads", "seed", "max_requests", "max_queue",
                "max_new_tokens", "steps_per_frame", "control_rate_hz", "replanning", "diagnostics_period_s"}
PER_ROBOT = [s.name for s in SPECS if s.name not in FLEET_SHARED]
ROBOT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _descriptor(spec: Spec) -> ParameterDescriptor:
    note = {"start": " (read at start)",
            "configure": " (applied at configure; changeable only while unconfigured)",
            "live": ""}[spec.when]
    d = ParameterDescriptor(description=spec.description + note, read_only=spec.when == "start")
    if spec.range is not None:
        lo, hi = spec.range
        if isinstance(spec.default, float):
            d.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
        else:
            d.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
    return d


def declare_parameters(node) -> list[str]:
    """Declare every parameter; returns the problems with overrides from the params file
    (wrong type, out of range); such a parameter keeps its default and configure fails."""
    problems = []
    for spec in SPECS:
        try:
            node.declare_parameter(spec.name, spec.default, _descriptor(spec))
        except Exception as e:  # InvalidParameterTypeException, InvalidParameterValueException
            problems.append(f"parameter {spec.name}: {e}")
            node.declare_parameter(spec.name, spec.default, _descriptor(spec), ignore_override=True)
    return problems


def check_robot_names(robots: list[str]) -> None:
    bad = [r for r in robots if not ROBOT_NAME.fullmatch(r)]
    if bad:
        raise ValueError(f"robot names {bad} are not plain names (a letter, then letters, digits or _): "
                         "each is a namespace and a parameter prefix")
    if len(set(robots)) != len(robots):
        raise ValueError(f"robots has duplicates: {robots}")


def declare_robot_parameters(node, robots: list[str]) -> list[str]:
    """Declare ROBOT.NAME for every robot and per-robot parameter, unset unless the params
    file sets it (then it overrides NAME for that robot); returns the problems (wrong type,
    out of range), as declare_parameters does."""
    problems = []
    for robot in robots:
        for name in PER_ROBOT:
            spec = SPEC[name]
            kind = spec.default if isinstance(spec.default, Parameter.Type) else \
                Parameter.Type.from_parameter_value(spec.default)
            try:
                node.declare_parameter(f"{robot}.{name}", kind, _descriptor(spec))
            except Exception as e:  # noqa: BLE001 - as declare_parameters
                problems.append(f"parameter {robot}.{name}: {e}")
                node.declare_parameter(f"{robot}.{name}", kind, _descriptor(spec), ignore_override=True)
    return problems


def read(node, names=None, robot: str = "") -> dict:
    """Values of the named parameters (all by default); ValueError for unset ones. For a
    fleet's `robot`, ROBOT.NAME where the params file set it, else NAME."""
    out = {}
    for name in names or SPEC:
        p = node.get_parameter_or(f"{robot}.{name}", None) if robot and name not in FLEET_SHARED else None
        if p is None or p.type_ == Parameter.Type.NOT_SET:
            p = node.get_parameter_or(name, None)
        if (p is None or p.type_ == Parameter.Type.NOT_SET) and not SPEC[name].required:
            out[name] = []
            continue
        if p is None or p.type_ == Parameter.Type.NOT_SET:
            raise ValueError(f"parameter {name} is not set (it has no default; set it in the params file)")
        out[name] = list(p.value) if isinstance(p.value, (list, tuple, array.array)) else p.value
    return out


LIVE = [s.name for s in SPECS if s.when == "live"]

# live text the model reads every frame: bounded, and no control bytes but line breaks and tabs
LIVE_TEXT = {"instruction", "narration_prompt", "memory_prompt", "answer_prompt"}
MAX_LIVE_TEXT_CHARS = 4096


def base_name(name: str) -> str:
    """A fleet robot's ROBOT.NAME as NAME; other names as they are."""
    robot, _, rest = name.partition(".")
    return rest if rest in SPEC and ROBOT_NAME.fullmatch(robot) else name


def applies_at(name: str) -> str:
    """A parameter's `when` (start | configure | live); "" for names outside the table."""
    spec = SPEC.get(base_name(name))
    return spec.when if spec else ""


def changeable(name: str, allowed: set) -> bool:
    """Whether the allow-list `allowed` lets `name` change (NAME also allows ROBOT.NAME)."""
    return name in allowed or base_name(name) in allowed


def unknown_names(names, robots) -> list[str]:
    """The entries of an allow-list that name no parameter of this node."""
    known = {*SPEC, "use_sim_time"}
    return sorted(n for n in names if n not in known
                  and not (n.partition(".")[0] in robots and n.partition(".")[2] in SPEC))


def value_problem(name: str, value) -> str:
    """Why a value is refused before it is set ("" if it is not): live text too long or
    holding control characters (the model would read it every frame)."""
    if base_name(name) not in LIVE_TEXT or not isinstance(value, str):
        return ""
    if len(value) > MAX_LIVE_TEXT_CHARS:
        return f"{name} has {len(value)} characters (at most {MAX_LIVE_TEXT_CHARS})"
    bad = sorted({f"U+{ord(c):04X}" for c in value if (ord(c) < 32 and c not in "\n\t") or 127 <= ord(c) < 160})
    return f"{name} contains control characters ({', '.join(bad[:5])})" if bad else ""


def build_engine(p: dict, robots: dict | None = None):
    """(model, tokenizer, engine) from the node's parameter values `p` (see read()); with
    `robots` (a fleet's per-robot values by name) the engine is a FleetEngine serving them.

    Raises ValueError/OSError with a clear message for a bad profile, path or dtype.
    torch and the engine are imported here, so reading parameters stays light."""
    import torch

    from ..engine.fleet import FleetEngine
    from ..engine.scheduler import EngineConfig, OxygenEngine
    from ..engine.registry import load_model

    if robots and any(_wants_xr0(q) for q in robots.values()):
        raise ValueError("fleet mode does not serve policy_io xr0 yet (each robot type fixes the "
                         "shared model's chunk horizon): run one node per XR-0 robot")

    if p["torch_threads"] > 0:
        torch.set_num_threads(p["torch_threads"])
    model, tok = load_model(p["model"], checkpoint=p["checkpoint"] or None,
                            tokenizer_path=p["tokenizer_path"] or None, dtype=p["dtype"], device=p["device"])
    if _wants_xr0(p):
        # the robot type's chunk horizon, before the engine sizes its KV slots (and before
        # the node reads model.cfg): XR-0 samples [H of the robot type, action_dim] chunks
        _fit_xr0_horizon(model, load_xr0_io(p))
    cfg = EngineConfig(max_requests=p["max_requests"], max_queue=p["max_queue"],
                       max_new_tokens=p["max_new_tokens"], steps_per_frame=p["steps_per_frame"],
                       period_s=1.0 / p["control_rate_hz"], seed=p["seed"], cuda_graphs=p["cuda_graphs"],
                       cameras=min(max(len(q["camera_topics"]) for q in (robots or {"": p}).values()),
                                   len(model.cfg.camera_slots)))
    if robots:
        return model, tok, FleetEngine(model, tok, cfg, max_robots=len(robots))
    return model, tok, OxygenEngine(model, tok, cfg)


POLICY_IOS = ("auto", "limits", "openpi", "lerobot", "xr0", "starvla")


def choose_policy_io(p: dict) -> str:
    """The policy I/O convention the parameters ask for ("auto" resolved)."""
    if p["policy_io"] not in POLICY_IOS:
        raise ValueError(f"policy_io must be one of {', '.join(POLICY_IOS)}, got {p['policy_io']!r}")
    if p["policy_io"] != "auto":
        return p["policy_io"]
    if p["model"] == "xr0" and p["checkpoint"]:
        return "xr0"
    if p["model"] == "starvla-pi" and p["checkpoint"]:
        return "starvla"
    return "checkpoint" if p["model"] in ("pi05", "pi05-quarter") and p["checkpoint"] else "limits"


def _wants_xr0(p: dict) -> bool:
    return p.get("policy_io") in POLICY_IOS and choose_policy_io(p) == "xr0"


def load_xr0_io(p: dict):
    """The XR0PolicyIO of the parameters' checkpoint and robot_type (PolicyIOError, a
    ValueError, with the checkpoint's robot types when robot_type is unknown or missing)."""
    from ..engine.policy_io import PolicyIOError
    from ..engine.registry import family

    if not p["checkpoint"]:
        raise ValueError("policy_io xr0 reads the checkpoint directory (its processor_config.json "
                         "action_config): set checkpoint")
    robot_type = p.get("robot_type", "") or None
    io = family("xr0").load_xr0_policy_io(p["checkpoint"], robot_type, stats_path=p["norm_stats_path"] or None)
    if io.robot_type is None:
        raise PolicyIOError(f"the checkpoint's action statistics ({io.stats_file}) define "
                            f"{len(io.robot_types)} robot types: set robot_type to one of "
                            f"{', '.join(io.robot_types)}")
    return io


def _fit_xr0_horizon(model, io) -> None:
    """Make the model sample the robot type's horizon (shorter than the head's
    action_length, e.g. CALVIN's 10 of 30: under the head's causal attention the first H
    actions of a longer chunk are the same, so only the compute differs)."""
    want, have = io.horizon(), model.cfg.expert.horizon
    if want == have:
        return
    if want > have or not hasattr(model, "set_action_schedule"):
        raise ValueError(f"robot_type {io.robot_type!r} has a {want}-step horizon in {io.stats_file}, but the "
                         f"model's action head samples {have} steps (config.json action_length)")
    model.set_action_schedule(horizon=want)


def _check_xr0(p: dict, model, io, state: JointSpace) -> None:
    """What the XR-0 deploy path fixes and the parameters must agree with."""
    cfg = model.cfg
    if getattr(getattr(cfg, "expert", None), "head_name", None) != "XR-0":
        raise ValueError(f"policy_io xr0 needs an XR-0 model (model xr0 with its checkpoint), got model {cfg.name}")
    unused = {"normalization": p["normalization"] != "", "asset_id": p["asset_id"] != "",
              "state_in_prompt": p["state_in_prompt"] != "auto"}
    if any(unused.values()):
        raise ValueError(f"{', '.join(k for k, v in unused.items() if v)} do(es) not apply to policy_io xr0 (the "
                         "deploy path feeds the raw state and unnormalises the actions with the checkpoint's "
                         "per-robot-type action statistics): leave normalization and asset_id empty and "
                         "state_in_prompt auto")
    if io.single_view():
        raise ValueError(f"robot_type {io.robot_type!r} (bridge/fractal) takes the client's own prompt text, "
                         "which the node cannot build: choose another robot type")
    if (io.action_dim, io.state_dim) != (cfg.expert.action_dim, cfg.expert.state_dim):
        raise ValueError(f"the action statistics are {io.action_dim}-dimensional and the state {io.state_dim}, "
                         f"but the model's head has action_dim {cfg.expert.action_dim} and state_dim "
                         f"{cfg.expert.state_dim}")
    if len(state.names) > io.state_dim:
        raise ValueError(f"{len(state.names)} state joints but XR-0's state has {io.state_dim} dimensions")
    if p["action_dims"] and p["action_dims"] != io.action_dims:
        raise ValueError(f"action_dims is {p['action_dims']} but robot_type {io.robot_type!r} has "
                         f"{io.action_dims} active action dims {list(io.active_dims())} (std > "
                         f"{io.mask_threshold:g}): set action_dims 0")
    n = io.expected_images()
    if len(p["camera_topics"]) != n:
        raise ValueError(f"XR-0's prompt has {n} views ([base, wrist_left]): set camera_topics to {n} topics "
                         f"in that order (got {len(p['camera_topics'])})")
    if tuple(cfg.camera_slots[:n]) != tuple(io.camera_slots[:n]):
        raise ValueError(f"the model's camera slots {list(cfg.camera_slots[:n])} are not XR-0's "
                         f"{list(io.camera_slots[:n])}")


def _xr0_delta_dims(p: dict, io) -> dict:
    """delta_action_mask (per robot action column) -> the robot type's model dims."""
    mask = list(p["delta_action_mask"])
    if not any(mask):
        return {}
    active = io.active_dims()
    if len(mask) > len(active):
        raise ValueError(f"delta_action_mask has {len(mask)} entries but robot_type {io.robot_type!r} has "
                         f"{len(active)} action dims")
    return {io.robot_type: [active[i] for i, b in enumerate(mask) if b]}


def build_policy_io(p: dict, model, tok, state: JointSpace, actions: JointSpace):
    """The LimitsIO, PolicyIO or XR0PolicyIO the parameters ask for, checked against the
    model and joints with a dry run (so a mismatch fails configure, not every frame).
    For xr0 the model's chunk horizon becomes the robot type's (build_engine already did)."""
    import numpy as np

    from ..engine.policy_io import LimitsIO
    from ..engine.registry import family

    cfg = model.cfg
    convention = choose_policy_io(p)
    if convention == "limits":
        io = LimitsIO.from_limits(state.lower, state.upper, actions.lower, actions.upper, cfg.expert.horizon)
    elif convention == "xr0":
        io = load_xr0_io(p)
        _check_xr0(p, model, io, state)
        deltas = _xr0_delta_dims(p, io)
        if deltas:
            io = family("xr0").load_xr0_policy_io(p["checkpoint"], io.robot_type, stats_path=p["norm_stats_path"] or None,
                                    delta_dims=deltas)
        _fit_xr0_horizon(model, io)
        cfg = model.cfg
        io.tokenizer, io.max_prompt_tokens = tok, cfg.max_prompt_tokens
    elif convention == "starvla":
        io = family("starvla").load_starvla_policy_io(p["checkpoint"], p["robot_type"] or None, stats_path=p["norm_stats_path"] or None)
    else:
        if not p["checkpoint"]:
            raise ValueError(f"policy_io {convention} reads the checkpoint directory: set checkpoint")
        if p["state_in_prompt"] not in ("auto", "true", "false"):
            raise ValueError(f"state_in_prompt must be auto, true or false, got {p['state_in_prompt']!r}")
        io = family("pi05").load_policy_io(
            p["checkpoint"], "auto" if convention == "checkpoint" else convention,
            asset_id=p["asset_id"] or None, normalization=p["normalization"] or None,
            action_dims=p["action_dims"] or None,
            state_in_prompt={"auto": None, "true": True, "false": False}[p["state_in_prompt"]],
            delta_action_mask=list(p["delta_action_mask"]) or None, image_size=cfg.vision.image_size,
            stats_path=p["norm_stats_path"] or None)
        io.tokenizer, io.max_prompt_tokens = tok, cfg.max_prompt_tokens
    if io.action_dims > cfg.expert.action_dim:
        raise ValueError(f"the policy uses {io.action_dims} action dimensions but the model's actions "
                         f"have {cfg.expert.action_dim}")
    if io.action_dims != len(actions.names):
        raise ValueError(f"the {io.convention} policy I/O gives {io.action_dims} action dimensions but "
                         f"{len(actions.names)} action joints are named ({list(actions.names)}): set "
                         "action_joint_names (and limits) or action_dims to match")
    zeros = np.zeros(len(state.names))
    size = cfg.vision.image_size
    slots = io.camera_slots[: io.expected_images()] if convention == "xr0" else cfg.camera_slots[:1]
    io.observation({s: np.zeros((size, size, 3), np.uint8) for s in slots}, zeros, p["instruction"])
    io.actions(np.zeros((cfg.expert.horizon, cfg.expert.action_dim), np.float32), zeros)
    return io
