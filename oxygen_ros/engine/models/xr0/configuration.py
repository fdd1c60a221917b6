"""Xiaomi-Robotics-0's profiles (its DiT head on the Qwen3-VL backbone):

- `qwen3vl-tiny`: random weights, seconds on a CPU (tests); the byte tokenizer with ChatML
  and image ids just above its 260 ids;
- `xr0-cpu`: XR-0's structure (Qwen3-VL backbone with DeepStack, a tail-aligned 8-layer
  DiT head, 30 x 32 chunks, 5 flow steps) at reduced widths with the real vocabulary
  size, random weights: side-by-side benchmarks on a CPU;
- `xr0`: the released model's sizes (Qwen3-VL-4B + the 16-layer DiT); weights, tokenizer
  and special ids come from the checkpoint directory (models/xr0/checkpoint.py).
"""
from __future__ import annotations

from ..qwen3vl.configuration import (QWEN_SPECIAL, SPECIAL_TINY, TEXT_4B, TEXT_CPU, TEXT_TINY, VISION_4B,
                                     VISION_CPU, VISION_TINY)
from ..qwen3vl.modeling import Qwen3VLModelConfig
from .head import XR0HeadConfig

QWEN3VL_TINY = Qwen3VLModelConfig(
    name="qwen3vl-tiny", vision=VISION_TINY, backbone=TEXT_TINY,
    expert=XR0HeadConfig(depth=2, width=32, num_heads=2, head_dim=16, mlp_dim=128, action_dim=8, horizon=10,
                         state_dim=8, denoise_steps=5),
    special=SPECIAL_TINY, max_prompt_tokens=160,
)

XR0_CPU = Qwen3VLModelConfig(
    name="xr0-cpu", vision=VISION_CPU, backbone=TEXT_CPU,
    expert=XR0HeadConfig(depth=8, width=256, num_heads=4, head_dim=64, mlp_dim=1024),
    special=QWEN_SPECIAL, max_prompt_tokens=100,
)

XR0 = Qwen3VLModelConfig(name="xr0", vision=VISION_4B, backbone=TEXT_4B, expert=XR0HeadConfig(),
                         special=QWEN_SPECIAL)

PROFILES = {c.name: c for c in (QWEN3VL_TINY, XR0_CPU, XR0)}
