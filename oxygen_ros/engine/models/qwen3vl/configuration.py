"""The Qwen3-VL backbone's configs: its text decoder from a transformers config.json, the
released vocabulary's special ids, and the backbone sizes the Qwen3-VL VLAs share (the
4B model, and a CPU-size one for benchmarks). A backbone knows no action head: the
profiles live with their heads (models/xr0, models/starvla, models/qwen3vl_multi)."""
from __future__ import annotations

from ...config import DecoderConfig
from .image_processing import Qwen3VLImageSettings
from .modeling import Qwen3VLVision, SpecialIds
from .vision import Qwen3VLVisionConfig

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
