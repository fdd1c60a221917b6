"""Xiaomi-Robotics-0's configuration: its DiT head's (XR0HeadConfig, which builds the head of
head.py) and its profiles (the head on the Qwen3-VL backbone):

- `qwen3vl-tiny`: random weights, seconds on a CPU (tests); the byte tokenizer with ChatML
  and image ids just above its 260 ids;
- `xr0-cpu`: XR-0's structure (Qwen3-VL backbone with DeepStack, a tail-aligned 8-layer
  DiT head, 30 x 32 chunks, 5 flow steps) at reduced widths with the real vocabulary
  size, random weights: side-by-side benchmarks on a CPU;
- `xr0`: the released model's sizes (Qwen3-VL-4B + the 16-layer DiT); weights, tokenizer
  and special ids come from the checkpoint directory (models/xr0/checkpoint.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...layers.dict_config import DictConfig, check_fields
from ..qwen3vl.configuration import (QWEN_SPECIAL, SPECIAL_TINY, TEXT_4B, TEXT_CPU, TEXT_TINY, VISION_4B,
                                     VISION_CPU, VISION_TINY, Qwen3VLModelConfig)
from .head import XR0Head

MASK_MODES = ("causal", "train_window")


@dataclass(frozen=True)
class XR0HeadConfig(DictConfig):
    """Defaults are the released checkpoint's; each field's source in modeling_mibot.py
    (checkpoint code) unless noted. `from_hf_dict` reads the names that code reads;
    `from_dict` / `to_dict` use the field names."""
    depth: int = 16              # config.dit_config.num_hidden_layers (XR0.py dit_num_layers=16)
    width: int = 1024            # config.dit_config.hidden_size
    num_heads: int = 8           # hidden_size // head_dim (Attention.num_heads)
    head_dim: int = 128          # config.dit_config.head_dim
    mlp_dim: int = 4096          # ActionMLP: hidden_size * 4 (hard-coded)
    action_dim: int = 32         # config.action_dim (XR0.py action_shape (30, 32))
    horizon: int = 30            # config.action_length
    state_dim: int = 32          # config.state_dim (state [B, 1, 32])
    denoise_steps: int = 5       # forward(num_steps=5)
    time_embed_dim: int = 256    # TimestepEmbedder frequency_embedding_size
    time_scale: float = 1000.0   # dit_forward: t_embedder(t * 1000)
    time_max_period: float = 10000.0  # timestep_embedding(max_period=10000)
    norm_eps: float = 1e-6       # Qwen3VLTextRMSNorm default
    rope_theta: float = 5_000_000.0   # vlm_config.text_config.rope_theta (Qwen3-VL-4B)
    mask_mode: str = "causal"    # "causal": checkpoint/deploy; "train_window": XR0.py
    local_window: int = 4        # XR0.py local_window (train_window mode only)
    action_position_offset: int = 0   # 0: checkpoint/deploy; 10: XR0.py training

    def __post_init__(self):
        if self.num_heads * self.head_dim != self.width:
            raise ValueError(f"XR0 head width {self.width} != num_heads {self.num_heads} x "
                             f"head_dim {self.head_dim}")
        if self.mask_mode not in MASK_MODES:
            raise ValueError(f"unknown mask_mode {self.mask_mode!r}; expected one of {MASK_MODES}")
        if self.time_embed_dim % 2:
            raise ValueError("time_embed_dim must be even")

    rtc_modes = ("guided",)      # one flow time per chunk (AdaLN-Zero): no trained RTC
    head_name = "XR-0"
    reads = "kv"                 # the tail layers' prefix K/V

    def build(self, backbone) -> "XR0Head":
        """The head module, checked against the backbone's DecoderConfig it reads."""
        head = XR0Head(self)
        head.check_backbone(backbone.num_kv_heads, backbone.head_dim, backbone.depth)
        return head

    @property
    def tokens(self) -> int:
        """Head tokens per chunk: sink + state + horizon actions."""
        return 2 + self.horizon

    @classmethod
    def from_hf_dict(cls, config: dict, **overrides) -> "XR0HeadConfig":
        """From the checkpoint's config.json (MiBoTConfig). The key names are the
        attributes modeling_mibot.py reads (config.json itself was not available to
        check); missing ones raise KeyError naming the key."""
        def need(d, key, where):
            if key not in d:
                raise KeyError(f"XR-0 config has no {where}{key!r}")
            return d[key]

        dit = need(config, "dit_config", "")
        width, head_dim = int(need(dit, "hidden_size", "dit_config.")), int(need(dit, "head_dim", "dit_config."))
        heads = width // head_dim
        kv = int(dit.get("num_key_value_heads", heads))
        if kv != heads:
            raise ValueError(f"XR-0 DiT with {heads} heads but {kv} KV heads: the engine needs them equal")
        values = dict(depth=int(need(dit, "num_hidden_layers", "dit_config.")), width=width,
                      num_heads=heads, head_dim=head_dim, mlp_dim=4 * width,
                      action_dim=int(need(config, "action_dim", "")),
                      horizon=int(need(config, "action_length", "")),
                      state_dim=int(need(config, "state_dim", "")))
        text = config.get("vlm_config", {}).get("text_config", {})
        theta = text.get("rope_theta", (text.get("rope_parameters") or {}).get("rope_theta"))
        if theta is not None:
            values["rope_theta"] = float(theta)
        check_fields(cls, overrides, TypeError)
        values.update(overrides)
        return cls(**values)


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
