"""One factory for a model, its engine and its policy I/O, from settings named like the
node's parameters (node/params.py reads them: model, checkpoint, policy_io, robot_type, ...).
The node, `oxygen serve`, the demo's rate measurement and the scripts call it, so the rules
that pick a policy I/O for a profile's checkpoint live here, in the engine, and nowhere else.

torch and the families are imported inside the functions: importing this stays light.
The joint spaces given to build_policy_io are anything with names, lower and upper
(node/joint_space.JointSpace).
"""
from __future__ import annotations


def build_engine(p: dict, robots: dict | None = None):
    """(model, tokenizer, engine) from the node's parameter values `p` (node/params.read); with
    `robots` (a fleet's per-robot values by name) the engine is a FleetEngine serving them.

    Raises ValueError/OSError with a clear message for a bad profile, path or dtype.
    torch is imported here, so importing this module stays light."""
    import torch

    from .fleet import FleetEngine
    from .registry import load_model
    from .scheduler import EngineConfig, OxygenEngine

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
    from .policy_io import PolicyIOError
    from .registry import family

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


def _check_xr0(p: dict, model, io, state) -> None:
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


def build_policy_io(p: dict, model, tok, state, actions):
    """The LimitsIO, PolicyIO or XR0PolicyIO the parameters ask for, checked against the
    model and joints with a dry run (so a mismatch fails configure, not every frame).
    For xr0 the model's chunk horizon becomes the robot type's (build_engine already did)."""
    import numpy as np

    from .policy_io import LimitsIO
    from .registry import family

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


def checkpoint_policy_io(profile: str, checkpoint: str | None, model, tok):
    """The policy I/O a checkpoint of `profile` brings for `oxygen serve` (its normalisation
    and prompt rules), or None where observations reach the model as given (no checkpoint,
    or a profile whose checkpoint `oxygen serve` reads without one)."""
    from .registry import family

    if not checkpoint or not profile.startswith("pi05"):
        return None
    io = family("pi05").load_policy_io(checkpoint, image_size=model.cfg.vision.image_size)
    io.tokenizer, io.max_prompt_tokens = tok, model.cfg.max_prompt_tokens
    return io
