"""The Qwen3-VL profiles (engine/config.py's get_config finds them here):

- `qwen3vl-tiny`: random weights, seconds on a CPU (tests); the byte tokenizer with
  ChatML and image ids just above its 260 ids;
- `xr0-cpu`: Xiaomi-Robotics-0's structure (Qwen3-VL backbone with DeepStack, a
  tail-aligned 8-layer DiT head, 30 x 32 chunks, 5 flow steps) at reduced widths with
  the real vocabulary size, random weights: side-by-side benchmarks on a CPU;
- `xr0`: the released model's sizes (Qwen3-VL-4B + the 16-layer DiT); weights, tokenizer
  and special ids come from the checkpoint directory (engine/weights/qwen3vl.py);
- `starvla-pi`: StarVLA's QwenPI_v3 (its head reads the prefix's per-layer hidden states);
  from a StarVLA checkpoint and the base Qwen3-VL directory it was trained from;
  `starvla-cpu` its structure at CPU size, random;
- `qwen3vl-multi-tiny` / `qwen3vl-multi-cpu`: several action experts on one Qwen3-VL
  prefix, language included (OxyGen's multi-expert measurement): XR-0's head first (the
  arm), then a StarVLA PI_v3-style head reading the per-layer hidden states ("hands"),
  then a second, smaller XR-0-style head reading the K/V ("base"); random weights.
"""
from __future__ import annotations

from .config import DecoderConfig
from .model.qwen3vl_vision import Qwen3VLVisionConfig
import dataclasses

from .model.pi_v3_head import PIv3HeadConfig
from .model.xr0_head import XR0HeadConfig
from .model.qwen3vl_vla import ExtraExpert, Qwen3VLModelConfig, Qwen3VLVision, SpecialIds
from .policy_io.qwen3vl_images import Qwen3VLImageSettings

# the released vocabulary's ids (QWEN3VL_VLA_FACTS.md); a checkpoint's own files override
QWEN_SPECIAL = SpecialIds(im_start=151644, im_end=151645, vision_start=151652, vision_end=151653,
                          image_pad=151655)


def _qwen_text(width, depth, mlp, heads, kv, head_dim, section, deepstack, vocab=151936) -> DecoderConfig:
    return DecoderConfig(width=width, depth=depth, mlp_dim=mlp, num_heads=heads, num_kv_heads=kv,
                         head_dim=head_dim, vocab_size=vocab, norm="llama", norm_eps=1e-6, activation="silu",
                         rope_theta=5_000_000.0, embed_scale=False, tie_embeddings=True, qk_norm=True,
                         mrope_section=section, deepstack_layers=deepstack)


QWEN3VL_TINY = Qwen3VLModelConfig(
    name="qwen3vl-tiny",
    # a 64 x 64 camera stays 64 x 64: 4 x 4 patches, 4 tokens; bigger frames are scaled
    # down to at most 128 x 128 (16 tokens)
    vision=Qwen3VLVision(Qwen3VLVisionConfig(depth=2, hidden_size=32, num_heads=2, intermediate_size=64,
                                             out_hidden_size=64, num_position_embeddings=64,
                                             deepstack_visual_indexes=(0, 1)),
                         Qwen3VLImageSettings(min_pixels=32 * 32, max_pixels=128 * 128), image_size=64),
    backbone=_qwen_text(64, 3, 128, 4, 2, 16, (4, 2, 2), 2, vocab=272),
    expert=XR0HeadConfig(depth=2, width=32, num_heads=2, head_dim=16, mlp_dim=128, action_dim=8, horizon=10,
                         state_dim=8, denoise_steps=5),
    special=SpecialIds(im_start=260, im_end=261, vision_start=262, vision_end=263, image_pad=264),
    max_prompt_tokens=160,
)

XR0_CPU = Qwen3VLModelConfig(
    name="xr0-cpu",
    vision=Qwen3VLVision(Qwen3VLVisionConfig(depth=6, hidden_size=256, num_heads=4, intermediate_size=1024,
                                             out_hidden_size=512, num_position_embeddings=2304,
                                             deepstack_visual_indexes=(1, 3, 5)),
                         Qwen3VLImageSettings(), image_size=224),
    backbone=_qwen_text(512, 12, 1536, 8, 4, 64, (12, 10, 10), 3),
    expert=XR0HeadConfig(depth=8, width=256, num_heads=4, head_dim=64, mlp_dim=1024),
    special=QWEN_SPECIAL,
    max_prompt_tokens=100,
)

XR0 = Qwen3VLModelConfig(
    name="xr0",
    vision=Qwen3VLVision(Qwen3VLVisionConfig(depth=24, hidden_size=1024, num_heads=16, intermediate_size=4096,
                                             out_hidden_size=2560, num_position_embeddings=2304,
                                             deepstack_visual_indexes=(5, 11, 17)),
                         Qwen3VLImageSettings(), image_size=224),
    backbone=_qwen_text(2560, 36, 9728, 32, 8, 128, (24, 20, 20), 3),
    expert=XR0HeadConfig(),
    special=QWEN_SPECIAL,
)

QWEN3VL_MULTI_TINY = dataclasses.replace(QWEN3VL_TINY, name="qwen3vl-multi-tiny", extra_experts=(
    ExtraExpert("hands", PIv3HeadConfig(depth=4, width=32, num_heads=2, head_dim=16, backbone_hidden=64,
                                        future_tokens=4, horizon=6, action_dim=6, state_dim=6, decoder_hidden=32,
                                        time_proj_dim=16, max_seq_len=32)),
    ExtraExpert("base", XR0HeadConfig(depth=1, width=32, num_heads=2, head_dim=16, mlp_dim=64, action_dim=3,
                                      horizon=5, state_dim=8, denoise_steps=3, time_embed_dim=16)),
))

QWEN3VL_MULTI_CPU = dataclasses.replace(XR0_CPU, name="qwen3vl-multi-cpu", extra_experts=(
    # PI_v3's structure at a quarter of its width: a block per backbone layer (12), 16-step chunks
    ExtraExpert("hands", PIv3HeadConfig(depth=12, width=256, num_heads=4, head_dim=64, backbone_hidden=512,
                                        decoder_hidden=256)),
    ExtraExpert("base", XR0HeadConfig(depth=4, width=256, num_heads=4, head_dim=64, mlp_dim=1024, action_dim=8,
                                      horizon=16, state_dim=32)),
))

# StarVLA's released QwenPI_v3 (Qwen3-VL-4B + the 36-block PI_v3 head); weights, tokenizer and
# special ids come from the checkpoint and its base Qwen3-VL directory (engine/weights/starvla.py)
STARVLA_PI = dataclasses.replace(XR0, name="starvla-pi", expert=PIv3HeadConfig())

# QwenPI_v3's structure at CPU size, random: xr0-cpu's backbone, a PI_v3 head with a block
# per backbone layer (12) at a quarter of its width
STARVLA_CPU = dataclasses.replace(XR0_CPU, name="starvla-cpu", expert=PIv3HeadConfig(
    depth=12, width=256, num_heads=4, head_dim=64, backbone_hidden=512, decoder_hidden=256))

QWEN3VL_PROFILES = {c.name: c for c in (QWEN3VL_TINY, XR0_CPU, XR0, STARVLA_PI, STARVLA_CPU,
                                        QWEN3VL_MULTI_TINY, QWEN3VL_MULTI_CPU)}
