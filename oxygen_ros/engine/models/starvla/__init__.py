"""StarVLA QwenPI_v3: its PI_v3 head reading the Qwen3-VL backbone's per-layer hidden states
(the family it builds on), its policy I/O (the state as text in the prompt), its checkpoint
reading (a run directory + the base Qwen3-VL directory) and its profiles."""
from .checkpoint import load_starvla
from .configuration import PROFILES, PIv3HeadConfig
from .head import PIv3Head
from .policy_io_hooks import build_policy_io, fit_model, serve_policy_io
from .processor import StarVLAPolicyIO, load_starvla_policy_io

__all__ = ["PIv3Head", "PIv3HeadConfig", "PROFILES", "StarVLAPolicyIO", "build_policy_io", "fit_model", "load",
           "load_starvla", "load_starvla_policy_io", "serve_policy_io"]


def load(name: str, cfg, checkpoint=None, tokenizer_path=None, dtype="float32", device="cpu"):
    if name == "starvla-pi":
        if not checkpoint:
            raise ValueError("the starvla-pi profile reads a StarVLA QwenPI_v3 checkpoint: pass checkpoint=<run "
                             "directory or its .pt> and tokenizer_path=<the base Qwen3-VL directory>")
        return load_starvla(checkpoint, tokenizer_path, dtype, device)
    import torch

    from ...config import parse_dtype
    from ...text.tokenizer import WideByteTokenizer
    from ..qwen3vl.modeling import build_random_qwen3vl

    if checkpoint:
        raise ValueError(f"the {name} profile has random weights; a checkpoint is for starvla-pi")
    model = build_random_qwen3vl(cfg).to(device=torch.device(device), dtype=parse_dtype(dtype))
    return model.eval().pack_weights(), WideByteTokenizer(cfg.backbone.vocab_size)
