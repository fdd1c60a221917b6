"""One factory for a model, its engine and its policy I/O, from settings named like the
node's parameters (node/params.py reads them: model, checkpoint, policy_io, robot_type, ...).
The node, `oxygen serve`, the demo's rate measurement and the scripts call it. It names no
family: engine/registry.py says which family serves a profile and which builds a policy I/O
convention, and that family's hooks (build_policy_io, fit_model, serve_policy_io) build it.

torch and the families are imported inside the functions: importing this stays light.
The joint spaces given to build_policy_io are anything with names, lower and upper
(node/joint_space.JointSpace).
"""
from __future__ import annotations


def with_checkpoint(p: dict) -> dict:
    """`p` with its checkpoint filled in where it is empty and the profile's family ships
    trained weights (registry.default_checkpoint): the model and its policy I/O then read
    the same folder."""
    from .registry import default_checkpoint

    if p.get("checkpoint") or not default_checkpoint(p.get("model", "")):
        return p
    return {**p, "checkpoint": default_checkpoint(p["model"])}


def build_engine(p: dict, robots: dict | None = None):
    """(model, tokenizer, engine) from the node's parameter values `p` (node/params.read); with
    `robots` (a fleet's per-robot values by name) the engine is a FleetEngine serving them.

    Raises ValueError/OSError with a clear message for a bad profile, path or dtype.
    torch is imported here, so importing this module stays light."""
    import torch

    from .fleet import FleetEngine
    from .registry import family, load_model
    from .scheduler import EngineConfig, OxygenEngine

    p = with_checkpoint(p)
    robots = {name: with_checkpoint(q) for name, q in (robots or {}).items()} or None
    for q in (robots or {}).values():
        convention, fam = _family_io(q)
        if fam is not None and fam.policy_io.not_in_fleet:
            raise ValueError(f"fleet mode does not serve policy_io {convention} yet {fam.policy_io.not_in_fleet}")

    if p["torch_threads"] > 0:
        torch.set_num_threads(p["torch_threads"])
    model, tok = load_model(p["model"], checkpoint=p["checkpoint"] or None,
                            tokenizer_path=p["tokenizer_path"] or None, dtype=p["dtype"], device=p["device"])
    convention, fam = _family_io(p)
    if fam is not None:
        # before the engine sizes its KV slots (and before the node reads model.cfg)
        family(fam.name).fit_model(convention, p, model)
    cfg = EngineConfig(max_requests=p["max_requests"], max_queue=p["max_queue"],
                       max_new_tokens=p["max_new_tokens"], steps_per_frame=p["steps_per_frame"],
                       period_s=1.0 / p["control_rate_hz"], seed=p["seed"], cuda_graphs=p["cuda_graphs"],
                       cameras=min(max(len(q["camera_topics"]) for q in (robots or {"": p}).values()),
                                   len(model.cfg.camera_slots)))
    if robots:
        return model, tok, FleetEngine(model, tok, cfg, max_robots=len(robots))
    return model, tok, OxygenEngine(model, tok, cfg)


def policy_io_values() -> tuple[str, ...]:
    """What the policy_io parameter may say: auto, the engine's limits, the families' own."""
    from .registry import policy_io_names

    return ("auto", "limits", *policy_io_names())


def choose_policy_io(p: dict) -> str:
    """The policy I/O convention the parameters ask for ("auto" resolved: the model's
    family's own where the profile's checkpoint brings one, else limits). `p` as
    with_checkpoint returns it: shipped weights count as a checkpoint."""
    from .registry import auto_policy_io

    values = policy_io_values()
    if p["policy_io"] not in values:
        raise ValueError(f"policy_io must be one of {', '.join(values)}, got {p['policy_io']!r}")
    if p["policy_io"] != "auto":
        return p["policy_io"]
    return (auto_policy_io(p["model"]) if p["checkpoint"] else None) or "limits"


def _family_io(p: dict):
    """(convention, the registry's Family that builds it or None); (None, None) for a
    policy_io value that is not one (build_policy_io reports it, at configure). `p` as
    with_checkpoint returns it."""
    from .registry import policy_io_family

    if p.get("policy_io") not in policy_io_values():
        return None, None
    convention = choose_policy_io(p)
    return convention, policy_io_family(convention)


def build_policy_io(p: dict, model, tok, state, actions):
    """The policy I/O the parameters ask for (the engine's LimitsIO, or the one a family's
    build_policy_io makes), checked against the model and joints with a dry run (so a
    mismatch fails configure, not every frame)."""
    import numpy as np

    from .policy_io import LimitsIO
    from .registry import family, policy_io_family

    p = with_checkpoint(p)
    convention = choose_policy_io(p)      # raises for a policy_io value that is not one
    fam = policy_io_family(convention)
    if fam is None:
        io = LimitsIO.from_limits(state.lower, state.upper, actions.lower, actions.upper, model.cfg.expert.horizon)
    else:
        io = family(fam.name).build_policy_io(convention, p, model, tok, state)
    cfg = model.cfg           # read after the hook: it may fit the model's horizon
    if io.action_dims > cfg.expert.action_dim:
        raise ValueError(f"the policy uses {io.action_dims} action dimensions but the model's actions "
                         f"have {cfg.expert.action_dim}")
    if io.action_dims != len(actions.names):
        raise ValueError(f"the {io.convention} policy I/O gives {io.action_dims} action dimensions but "
                         f"{len(actions.names)} action joints are named ({list(actions.names)}): set "
                         "action_joint_names (and limits) or action_dims to match")
    zeros = np.zeros(len(state.names))
    size = cfg.vision.image_size
    # a policy I/O that says how many views it takes is tried with those, others with one
    views = getattr(io, "expected_images", None)
    slots = io.camera_slots[: views()] if views else cfg.camera_slots[:1]
    io.observation({s: np.zeros((size, size, 3), np.uint8) for s in slots}, zeros, p["instruction"])
    io.actions(np.zeros((cfg.expert.horizon, cfg.expert.action_dim), np.float32), zeros)
    return io


def checkpoint_policy_io(profile: str, checkpoint: str | None, model, tok):
    """The policy I/O a checkpoint of `profile` brings for `oxygen serve` (its normalisation
    and prompt rules), or None where observations reach the model as given (no checkpoint,
    or a profile whose family's serve_policy_io says None)."""
    from .registry import auto_policy_io, family, family_of

    if not checkpoint or auto_policy_io(profile) is None:
        return None
    return family(family_of(profile).name).serve_policy_io(profile, checkpoint, model, tok)
