"""The decoder config every family builds on, and the dtype spellings every loader accepts.

One decoder config serves every backbone (Gemma for pi0.5, Llama for SmolLM2, Qwen3-VL's
text model with its three-axis RoPE and DeepStack). Each family's own configs and named
profiles live in its folder (engine/models/<family>/configuration.py), found by name
through engine/registry.py.
"""
from __future__ import annotations

from dataclasses import dataclass

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
    qk_norm: bool = False          # RMSNorm (style `norm`, eps `norm_eps`) over head_dim on q, k before RoPE
    # Qwen3-VL's interleaved three-axis RoPE: how many of the head_dim/2 frequencies the
    # (t, h, w) axes own (sums to head_dim/2). None: 1-D RoPE. Set, positions may be
    # [3, B, T]; [B, T] positions mean all three axes equal (text and decode).
    mrope_section: tuple[int, ...] | None = None
    # DeepStack: the first `deepstack_layers` layers may each get visual features added
    # at the image-token positions after them (0: none).
    deepstack_layers: int = 0

    def __post_init__(self):
        if self.mrope_section is not None:
            section = tuple(int(s) for s in self.mrope_section)
            object.__setattr__(self, "mrope_section", section)
            if len(section) != 3 or min(section) < 0 or sum(section) != self.head_dim // 2:
                raise ValueError(f"mrope_section {section} must be three sizes summing to "
                                 f"head_dim/2 = {self.head_dim // 2}")
        if not 0 <= self.deepstack_layers <= self.depth:
            raise ValueError(f"deepstack_layers {self.deepstack_layers} must be in 0..depth={self.depth}")


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
