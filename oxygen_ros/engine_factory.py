"""Model and engine construction from the node's parameters (no ROS types here)."""
import torch

from .engine.loading import load_model
from .engine.scheduler import EngineConfig, OxygenEngine


def build_engine(p: dict):
    """(model, tokenizer, engine) from the node's parameter values `p` (node_params.read).

    Raises ValueError/OSError with a clear message for a bad profile, path or dtype."""
    if p["torch_threads"] > 0:
        torch.set_num_threads(p["torch_threads"])
    model, tok = load_model(p["model"], checkpoint=p["checkpoint"] or None,
                            tokenizer_path=p["tokenizer_path"] or None, dtype=p["dtype"], device=p["device"])
    cfg = EngineConfig(max_requests=p["max_requests"], max_queue=p["max_queue"],
                       max_new_tokens=p["max_new_tokens"], steps_per_frame=p["steps_per_frame"],
                       period_s=1.0 / p["control_rate_hz"], seed=p["seed"], cuda_graphs=p["cuda_graphs"],
                       cameras=min(len(p["camera_topics"]), len(model.cfg.camera_slots)))
    return model, tok, OxygenEngine(model, tok, cfg)
