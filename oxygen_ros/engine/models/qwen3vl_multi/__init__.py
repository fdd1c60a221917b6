"""Several action experts on one Qwen3-VL prefix (XR-0's head, a StarVLA PI_v3-style head
and a second XR-0-style head), random weights: OxyGen's multi-expert measurement. It
builds on qwen3vl, xr0 and starvla and is the only family that combines others' heads."""
from .configuration import PROFILES

__all__ = ["PROFILES", "load"]


def load(name: str, cfg, checkpoint=None, tokenizer_path=None, dtype="float32", device="cpu"):
    from ..xr0 import load_random

    return load_random(name, cfg, checkpoint, dtype, device)
