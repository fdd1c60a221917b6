"""The Qwen3-VL backbone (text decoder with three-axis RoPE and DeepStack, vision encoder,
image processing, tokenizer, checkpoint reader) behind the engine's model interface, with
whatever action heads its config names (it knows none itself: xr0 and starvla build on it).
Alone (profile `qwen3vl`, a transformers Qwen3-VL directory) it serves language only."""
from .checkpoint import checkpoint_kind, inspect_qwen3vl_checkpoint, load_qwen3vl
from .configuration import QWEN_SPECIAL
from .modeling import Qwen3VLVLA, build_random_qwen3vl

PROFILES: dict = {}      # `qwen3vl` has no fixed sizes: its config.json gives them (load)

__all__ = ["PROFILES", "QWEN_SPECIAL", "Qwen3VLVLA", "build_random_qwen3vl", "checkpoint_kind",
           "inspect_qwen3vl_checkpoint", "load", "load_qwen3vl"]


def load(name: str, cfg, checkpoint=None, tokenizer_path=None, dtype="float32", device="cpu"):
    if not checkpoint:
        raise ValueError("the qwen3vl profile reads a Qwen3-VL checkpoint directory (config.json, "
                         "model.safetensors, tokenizer.json): pass checkpoint=<dir>")
    return load_qwen3vl(checkpoint, tokenizer_path, dtype, device)
