"""Model loading and engine construction from the node's parameters (what on_configure does)."""
from __future__ import annotations

import torch

from .engine.scheduler import EngineConfig, OxygenEngine


def load_model(name: str, checkpoint: str = "", tokenizer_path: str = "", dtype: str = "float32",
               device: str = "cpu"):
    """(model, tokenizer) for a profile name; ValueError/OSError with a clear message."""
    try:
        from .engine.loading import load_model as engine_load
    except ModuleNotFoundError as e:
        if e.name != "oxygen_ros.engine.loading":
            raise
        engine_load = None
    if engine_load is not None:
        return engine_load(name, checkpoint=checkpoint or None, tokenizer_path=tokenizer_path or None,
                           dtype=dtype, device=device)
    # Until oxygen_ros.engine.loading exists: the random tiny profile only.
    from .engine.config import get_config
    from .engine.model import build_random_model
    from .engine.tokenizer import ByteTokenizer

    cfg = get_config(name)
    if cfg.name != "tiny":
        raise ValueError(f"model {name!r} needs oxygen_ros.engine.loading, which is not installed")
    if checkpoint:
        raise ValueError("the tiny profile has random weights; leave checkpoint empty")
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return build_random_model(cfg).to(device=torch.device(device), dtype=dt), ByteTokenizer()


def build_engine(p: dict):
    """(model, tokenizer, engine) from the node's parameter values `p` (node_params.read)."""
    if p["torch_threads"] > 0:
        torch.set_num_threads(p["torch_threads"])
    model, tok = load_model(p["model"], p["checkpoint"], p["tokenizer_path"], p["dtype"], p["device"])
    cfg = EngineConfig(max_requests=p["max_requests"], max_queue=p["max_queue"],
                       max_new_tokens=p["max_new_tokens"], steps_per_frame=p["steps_per_frame"],
                       period_s=1.0 / p["control_rate_hz"], seed=p["seed"])
    return model, tok, OxygenEngine(model, tok, cfg)
