"""pi0.5's policy I/O hooks for engine/factory.py (engine/registry.py describes them): an
openpi or LeRobot checkpoint's PolicyIO (processor.py) from the node's parameters, and the
one `oxygen serve` puts between its clients and a pi0.5 checkpoint."""
from __future__ import annotations

from .processor import load_policy_io

STATE_IN_PROMPT = {"auto": None, "true": True, "false": False}


def build_policy_io(convention: str, p: dict, model, tok, state):
    """The checkpoint's PolicyIO under `convention` ("openpi", "lerobot", or the registry's
    "checkpoint": what the checkpoint's own files say, load_policy_io's "auto")."""
    if not p["checkpoint"]:
        raise ValueError(f"policy_io {convention} reads the checkpoint directory: set checkpoint")
    if p["state_in_prompt"] not in STATE_IN_PROMPT:
        raise ValueError(f"state_in_prompt must be auto, true or false, got {p['state_in_prompt']!r}")
    cfg = model.cfg
    io = load_policy_io(
        p["checkpoint"], "auto" if convention == "checkpoint" else convention,
        asset_id=p["asset_id"] or None, normalization=p["normalization"] or None,
        action_dims=p["action_dims"] or None, state_in_prompt=STATE_IN_PROMPT[p["state_in_prompt"]],
        delta_action_mask=list(p["delta_action_mask"]) or None, image_size=cfg.vision.image_size,
        stats_path=p["norm_stats_path"] or None)
    io.tokenizer, io.max_prompt_tokens = tok, cfg.max_prompt_tokens
    return io


def fit_model(convention: str, p: dict, model) -> None:
    """Nothing: pi0.5's policy I/O takes the model's chunks as they are."""


def serve_policy_io(profile: str, checkpoint: str, model, tok):
    """The checkpoint's own normalisation and prompt rules, for `oxygen serve`."""
    io = load_policy_io(checkpoint, image_size=model.cfg.vision.image_size)
    io.tokenizer, io.max_prompt_tokens = tok, model.cfg.max_prompt_tokens
    return io
