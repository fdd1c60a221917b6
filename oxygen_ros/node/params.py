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

from ..engine.text import prompts   # model-agnostic defaults; params files set a profile's prompts

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
    Spec("new_observations_only", False, "live",
         "Act only on inputs newer than the last frame's: a tick whose inputs carry the stamps the "
         "last chunk came from makes no chunk ('no new observation'), as a lock-step sim (oxygen "
         "eval --clock sim) or a paused bag needs; a chunk restamped (clock jump, stamp off the clock) or "
         "expired does not count. false: every tick acts on the latest inputs."),
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
