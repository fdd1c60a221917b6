"""StarVLA QwenPI_v3's profiles (its PI_v3 head reads the prefix's per-layer hidden states):

- `starvla-pi`: the released sizes (Qwen3-VL-4B + the 36-block PI_v3 head); weights,
  tokenizer and special ids come from a StarVLA checkpoint and the base Qwen3-VL
  directory it was trained from (models/starvla/checkpoint.py);
- `starvla-cpu`: its structure at CPU size, random: the CPU-size Qwen3-VL backbone, a
  PI_v3 head with a block per backbone layer (12) at a quarter of its width.
"""
from __future__ import annotations

from ..qwen3vl.configuration import QWEN_SPECIAL, TEXT_4B, TEXT_CPU, VISION_4B, VISION_CPU
from ..qwen3vl.modeling import Qwen3VLModelConfig
from .head import PIv3HeadConfig

STARVLA_PI = Qwen3VLModelConfig(name="starvla-pi", vision=VISION_4B, backbone=TEXT_4B, expert=PIv3HeadConfig(),
                                special=QWEN_SPECIAL)

STARVLA_CPU = Qwen3VLModelConfig(
    name="starvla-cpu", vision=VISION_CPU, backbone=TEXT_CPU,
    expert=PIv3HeadConfig(depth=12, width=256, num_heads=4, head_dim=64, backbone_hidden=512, decoder_hidden=256),
    special=QWEN_SPECIAL, max_prompt_tokens=100,
)

PROFILES = {c.name: c for c in (STARVLA_PI, STARVLA_CPU)}
