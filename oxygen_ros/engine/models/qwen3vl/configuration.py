"""The Qwen3-VL backbone's configs: its vision encoder's (Qwen3VLVisionConfig, from a
transformers config.json's vision_config) and a profile's vision side (Qwen3VLVision), the
model's (Qwen3VLModelConfig, with its special ids and further experts), its text decoder
from a transformers config.json, the released vocabulary's special ids, and the backbone
sizes the Qwen3-VL VLAs share (the 4B model, and a CPU-size one for benchmarks). The
modules they configure (vision.py, modeling.py) import them from here, never the other way.
A backbone knows no action head: the profiles live with their heads (models/xr0,
models/starvla, models/qwen3vl_multi)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from ...config import DecoderConfig
from .image_processing import Qwen3VLImageSettings, image_token_count, smart_resize

# transformers' Qwen3VLVisionConfig defaults, used for keys a config.json leaves out
_HF_DEFAULTS = dict(depth=27, hidden_size=1152, hidden_act="gelu_pytorch_tanh", intermediate_size=4304,
                    num_heads=16, in_channels=3, patch_size=16, spatial_merge_size=2,
                    temporal_patch_size=2, out_hidden_size=3584, num_position_embeddings=2304,
                    deepstack_visual_indexes=(8, 16, 24))

# the transformers ACT2FN names the vision encoder runs (vision.py): tanh-approximated
# GELU, exact GELU, SiLU
TANH_GELU = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new", "gelu_fast")
VISION_ACTIVATIONS = frozenset({*TANH_GELU, "gelu", "silu"})


@dataclass(frozen=True)
class Qwen3VLVisionConfig:
    depth: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    out_hidden_size: int
    num_position_embeddings: int
    deepstack_visual_indexes: tuple[int, ...]
    hidden_act: str = "gelu_pytorch_tanh"
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6          # fixed in transformers' modules, not in config.json

    def __post_init__(self):
        object.__setattr__(self, "deepstack_visual_indexes", tuple(int(i) for i in self.deepstack_visual_indexes))
        for name in ("depth", "hidden_size", "num_heads", "intermediate_size", "out_hidden_size",
                     "num_position_embeddings", "patch_size", "temporal_patch_size",
                     "spatial_merge_size", "in_channels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Qwen3-VL vision config: {name} must be a positive int, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"Qwen3-VL vision config: hidden_size {self.hidden_size} is not a multiple "
                             f"of num_heads {self.num_heads}")
        if self.head_dim % 4:
            raise ValueError(f"Qwen3-VL vision config: head_dim {self.head_dim} must be a multiple of 4 "
                             "(2-D rotary over rows and columns)")
        side = math.isqrt(self.num_position_embeddings)
        if side * side != self.num_position_embeddings:
            raise ValueError(f"Qwen3-VL vision config: num_position_embeddings {self.num_position_embeddings} "
                             "is not a square (the learned positions form a square grid)")
        bad = [i for i in self.deepstack_visual_indexes if not 0 <= i < self.depth]
        if bad or len(set(self.deepstack_visual_indexes)) != len(self.deepstack_visual_indexes):
            raise ValueError(f"Qwen3-VL vision config: deepstack_visual_indexes {list(self.deepstack_visual_indexes)} "
                             f"must be distinct layer indexes in [0, {self.depth})")
        if self.hidden_act not in VISION_ACTIVATIONS:
            raise ValueError(f"Qwen3-VL vision config: unsupported hidden_act {self.hidden_act!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def position_grid_side(self) -> int:
        return math.isqrt(self.num_position_embeddings)

    @classmethod
    def from_hf_dict(cls, d: dict) -> "Qwen3VLVisionConfig":
        """From a transformers config.json's `vision_config` dict (the whole config.json is
        accepted too); keys it leaves out take transformers' defaults."""
        if "vision_config" in d:
            d = d["vision_config"]
        values = {k: d.get(k, v) for k, v in _HF_DEFAULTS.items()}
        for k in ("patch_size", "temporal_patch_size"):
            if isinstance(values[k], (list, tuple)):
                if len(set(values[k])) != 1:
                    raise ValueError(f"Qwen3-VL vision config: non-square {k} {values[k]} is not supported")
                values[k] = values[k][0]
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "axial")) not in ("axial", "default"):
            raise ValueError(f"Qwen3-VL vision config: rope type {rope.get('rope_type')!r} is not supported")
        theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known}, rope_theta=float(theta))


@dataclass(frozen=True)
class Qwen3VLVision:
    """The vision side of a profile: the encoder, the image processing, and the square
    camera frame size the profile expects (the node's and the bench's synthetic frames;
    real cameras may send any size, each becomes its own token grid)."""
    encoder: Qwen3VLVisionConfig
    images: Qwen3VLImageSettings = field(default_factory=Qwen3VLImageSettings)
    image_size: int = 224

    @property
    def tokens_per_image(self) -> int:
        """Tokens an image_size x image_size frame becomes (slot sizing)."""
        h, w = smart_resize(self.image_size, self.image_size, self.images.factor,
                            self.images.min_pixels, self.images.max_pixels)
        return image_token_count([[1, h // self.images.patch_size, w // self.images.patch_size]],
                                 self.images.merge_size)[0]


@dataclass(frozen=True)
class SpecialIds:
    """ChatML and image token ids (from the checkpoint's config and tokenizer)."""
    im_start: int
    im_end: int
    vision_start: int
    vision_end: int
    image_pad: int


@dataclass(frozen=True)
class ExtraExpert:
    """A further action expert on the shared prefix: its name (its chunks' key in the
    engine's results) and its config (XR0HeadConfig, or a hidden-state reader's)."""
    name: str
    cfg: object


@dataclass(frozen=True)
class Qwen3VLModelConfig:
    name: str
    vision: Qwen3VLVision
    backbone: DecoderConfig
    expert: object                  # the first action head's config (XR-0's, StarVLA's); None: language only
    special: SpecialIds
    camera_slots: tuple[str, ...] = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    prefix_attention: str = "causal"
    max_prompt_tokens: int = 200
    seed: int = 0
    extra_experts: tuple[ExtraExpert, ...] = ()
    request_turn: str = "continue"   # "continue" the prefix's user turn | "new" user turn
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def reads_hidden_states(self) -> bool:
        return reads_hidden(self.expert) or any(reads_hidden(e.cfg) for e in self.extra_experts)

    def with_expert(self, **kw) -> "Qwen3VLModelConfig":
        if self.expert is None:
            raise ValueError(f"{self.name} has no action head (a language-only model)")
        return replace(self, expert=replace(self.expert, **kw))


def reads_hidden(expert_cfg) -> bool:
    """Whether an expert reads the prefix's hidden states (else its K/V)."""
    return getattr(expert_cfg, "reads", "kv") == "hidden_states"


# the released vocabulary's ids (QWEN3VL_VLA_FACTS.md); a checkpoint's own files override
QWEN_SPECIAL = SpecialIds(im_start=151644, im_end=151645, vision_start=151652, vision_end=151653,
                          image_pad=151655)


def text_config_from_hf(d: dict, *, tie_embeddings: bool | None = None,
                        deepstack_layers: int | None = None) -> DecoderConfig:
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
    return DecoderConfig(
        width=width, depth=int(t["num_hidden_layers"]), mlp_dim=int(t["intermediate_size"]),
        num_heads=heads, num_kv_heads=int(t.get("num_key_value_heads") or heads),
        head_dim=int(t.get("head_dim") or width // heads), vocab_size=int(t["vocab_size"]),
        norm="llama", norm_eps=float(t.get("rms_norm_eps", 1e-6)), activation="silu",
        rope_theta=float(theta),
        embed_scale=False, tie_embeddings=tie_embeddings, qk_norm=True,
        mrope_section=tuple(rope.get("mrope_section", (24, 20, 20))),
        deepstack_layers=deepstack_layers)


def qwen_text(width, depth, mlp, heads, kv, head_dim, section, deepstack, vocab=151936) -> DecoderConfig:
    """A Qwen3-VL text decoder of these sizes (qk-norm, SiLU, interleaved MRoPE, tied)."""
    return DecoderConfig(width=width, depth=depth, mlp_dim=mlp, num_heads=heads, num_kv_heads=kv,
                         head_dim=head_dim, vocab_size=vocab, norm="llama", norm_eps=1e-6, activation="silu",
                         rope_theta=5_000_000.0, embed_scale=False, tie_embeddings=True, qk_norm=True,
                         mrope_section=section, deepstack_layers=deepstack)


# Qwen3-VL-4B (the backbone of the released Xiaomi-Robotics-0 and StarVLA QwenPI_v3)
VISION_4B = Qwen3VLVision(Qwen3VLVisionConfig(depth=24, hidden_size=1024, num_heads=16, intermediate_size=4096,
                                              out_hidden_size=2560, num_position_embeddings=2304,
                                              deepstack_visual_indexes=(5, 11, 17)),
                          Qwen3VLImageSettings(), image_size=224)
TEXT_4B = qwen_text(2560, 36, 9728, 32, 8, 128, (24, 20, 20), 3)

# its structure at CPU size with the real vocabulary (random-weight benchmark profiles)
VISION_CPU = Qwen3VLVision(Qwen3VLVisionConfig(depth=6, hidden_size=256, num_heads=4, intermediate_size=1024,
                                               out_hidden_size=512, num_position_embeddings=2304,
                                               deepstack_visual_indexes=(1, 3, 5)),
                           Qwen3VLImageSettings(), image_size=224)
TEXT_CPU = qwen_text(512, 12, 1536, 8, 4, 64, (12, 10, 10), 3)

# seconds on a CPU (tests): a 64 x 64 camera stays 64 x 64: 4 x 4 patches, 4 tokens; bigger
# frames are scaled down to at most 128 x 128 (16 tokens); ids just above the byte tokenizer's
VISION_TINY = Qwen3VLVision(Qwen3VLVisionConfig(depth=2, hidden_size=32, num_heads=2, intermediate_size=64,
                                                out_hidden_size=64, num_position_embeddings=64,
                                                deepstack_visual_indexes=(0, 1)),
                            Qwen3VLImageSettings(min_pixels=32 * 32, max_pixels=128 * 128), image_size=64)
TEXT_TINY = qwen_text(64, 3, 128, 4, 2, 16, (4, 2, 2), 2, vocab=272)
SPECIAL_TINY = SpecialIds(im_start=260, im_end=261, vision_start=262, vision_end=263, image_pad=264)
