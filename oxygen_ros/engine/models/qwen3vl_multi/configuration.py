"""Several action experts on one Qwen3-VL prefix, language included (OxyGen's multi-expert
measurement): XR-0's head first (the arm), then a StarVLA PI_v3-style head reading the
per-layer hidden states ("hands"), then a second, smaller XR-0-style head reading the K/V
("base"); random weights. `qwen3vl-multi-tiny` for tests, `qwen3vl-multi-cpu` for benchmarks."""
from __future__ import annotations

import dataclasses

from ..qwen3vl.configuration import ExtraExpert
from ..starvla.configuration import PIv3HeadConfig
from ..xr0.configuration import QWEN3VL_TINY, XR0_CPU, XR0HeadConfig

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

PROFILES = {c.name: c for c in (QWEN3VL_MULTI_TINY, QWEN3VL_MULTI_CPU)}
