"""XR-0's policy I/O hooks for engine/factory.py (engine/registry.py describes them): the
checkpoint's XR0PolicyIO for the parameters' robot type, what the node's parameters must
agree with, and the head's chunk horizon fitted to the robot type's."""
from __future__ import annotations

from ...policy_io.errors import PolicyIOError
from .policy_io_loader import load_xr0_policy_io


def build_policy_io(convention: str, p: dict, model, tok, state):
    """The XR0PolicyIO of the parameters' checkpoint and robot_type, checked against the
    model and the state joints; the model samples the robot type's horizon (fit_model did
    it before the engine was built)."""
    io = _load(p)
    _check(p, model, io, state)
    deltas = _delta_dims(p, io)
    if deltas:
        io = load_xr0_policy_io(p["checkpoint"], io.robot_type, stats_path=p["norm_stats_path"] or None,
                                delta_dims=deltas)
    _fit_horizon(model, io)
    io.tokenizer, io.max_prompt_tokens = tok, model.cfg.max_prompt_tokens
    return io


def fit_model(convention: str, p: dict, model) -> None:
    """The robot type's chunk horizon, before the engine sizes its KV slots (and before the
    node reads model.cfg): XR-0 samples [H of the robot type, action_dim] chunks."""
    _fit_horizon(model, _load(p))


def serve_policy_io(profile: str, checkpoint: str, model, tok):
    """None: `oxygen serve` passes its clients' observations to an XR-0 model as given."""
    return None


def _load(p: dict):
    """The XR0PolicyIO of the parameters' checkpoint and robot_type (PolicyIOError, a
    ValueError, with the checkpoint's robot types when robot_type is unknown or missing)."""
    if not p["checkpoint"]:
        raise ValueError("policy_io xr0 reads the checkpoint directory (its processor_config.json "
                         "action_config): set checkpoint")
    robot_type = p.get("robot_type", "") or None
    io = load_xr0_policy_io(p["checkpoint"], robot_type, stats_path=p["norm_stats_path"] or None)
    if io.robot_type is None:
        raise PolicyIOError(f"the checkpoint's action statistics ({io.stats_file}) define "
                            f"{len(io.robot_types)} robot types: set robot_type to one of "
                            f"{', '.join(io.robot_types)}")
    return io


def _fit_horizon(model, io) -> None:
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


def _check(p: dict, model, io, state) -> None:
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


def _delta_dims(p: dict, io) -> dict:
    """delta_action_mask (per robot action column) -> the robot type's model dims."""
    mask = list(p["delta_action_mask"])
    if not any(mask):
        return {}
    active = io.active_dims()
    if len(mask) > len(active):
        raise ValueError(f"delta_action_mask has {len(mask)} entries but robot_type {io.robot_type!r} has "
                         f"{len(active)} action dims")
    return {io.robot_type: [active[i] for i, b in enumerate(mask) if b]}
