"""Xiaomi-Robotics-0: its DiT action head on the Qwen3-VL backbone (the family it builds on),
its deploy policy I/O (processor), its checkpoint layout and its profiles."""
from .checkpoint import checkpoint_kind, inspect_checkpoint, load_xr0
from .configuration import PROFILES, XR0HeadConfig
from .head import XR0Head
from .policy_io_hooks import build_policy_io, fit_model, serve_policy_io
from .policy_io_loader import load_xr0_policy_io
from .processor import XR0PolicyIO

__all__ = ["PROFILES", "XR0Head", "XR0HeadConfig", "XR0PolicyIO", "build_policy_io", "checkpoint_kind",
           "fit_model", "inspect_checkpoint", "load", "load_xr0", "load_xr0_policy_io", "serve_policy_io"]


def load(name: str, cfg, checkpoint=None, tokenizer_path=None, dtype="float32", device="cpu"):
    if name == "xr0":
        if not checkpoint:
            raise ValueError("the xr0 profile reads a Xiaomi-Robotics-0 checkpoint directory: pass "
                             "checkpoint=<dir with config.json, model.safetensors(.index.json), tokenizer.json>; "
                             "xr0-cpu has random weights")
        return load_xr0(checkpoint, tokenizer_path, dtype, device)
    return load_random(name, cfg, checkpoint, dtype, device)


def load_random(name: str, cfg, checkpoint, dtype: str, device: str):
    """A random-weight Qwen3-VL profile: the byte tokenizer (ChatML and image ids above its
    bytes) for the -tiny ones, WideByteTokenizer for the CPU-size ones."""
    import torch

    from ...config import parse_dtype
    from ...text.tokenizer import ByteTokenizer, WideByteTokenizer
    from ..qwen3vl.modeling import build_random_qwen3vl

    if checkpoint:
        raise ValueError(f"the {name} profile has random weights; a checkpoint is for the xr0 / starvla-pi profiles")
    tok = ByteTokenizer() if name.endswith("-tiny") else WideByteTokenizer(cfg.backbone.vocab_size)
    model = build_random_qwen3vl(cfg).to(device=torch.device(device), dtype=parse_dtype(dtype))
    return model.eval().pack_weights(), tok
