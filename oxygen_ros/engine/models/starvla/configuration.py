"""StarVLA QwenPI_v3's configuration: its PI_v3 head's (PIv3HeadConfig, which builds the head
of head.py) and its profiles (the head reads the prefix's per-layer hidden states):

- `starvla-pi`: the released sizes (Qwen3-VL-4B + the 36-block PI_v3 head); weights,
  tokenizer and special ids come from a StarVLA checkpoint and the base Qwen3-VL
  directory it was trained from (models/starvla/checkpoint.py);
- `starvla-cpu`: its structure at CPU size, random: the CPU-size Qwen3-VL backbone, a
  PI_v3 head with a block per backbone layer (12) at a quarter of its width.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...layers.dict_config import DictConfig, check_fields
from ..qwen3vl.configuration import QWEN_SPECIAL, TEXT_4B, TEXT_CPU, VISION_4B, VISION_CPU, Qwen3VLModelConfig
from .head import PIv3Head

STATE_MODES = ("text", "encoder")


@dataclass(frozen=True)
class PIv3HeadConfig(DictConfig):
    """Defaults are the released checkpoint's (StarVLA/Qwen3VL-PI_v3-Bridge-RT_1 on
    Qwen3-VL-4B). Sources: QwenPI_v3.py (QwenPI_v3DefaultConfig / __init__),
    LayerwiseFM_ActionHeader.py (head), cross_attention_dit.py (DiT defaults).
    `from_hf_dict` reads StarVLA's config names; `from_dict` / `to_dict` use the field names."""
    depth: int = 36                 # DiT blocks = layers read: qwenvl.num_vl_layers (hard-coded 36)
    width: int = 1024               # diffusion_model_cfg.action_dit_hidden_dim -> input_embedding_dim
    num_heads: int = 16             # width // attention_head_dim (populate_layerwise_dit_cfg)
    head_dim: int = 64              # diffusion_model_cfg.attention_head_dim
    backbone_hidden: int = 2560     # qwenvl.vl_hidden_dim (set from the VLM: Qwen3-VL-4B 2560)
    future_tokens: int = 32         # action_model.num_target_vision_tokens
    horizon: int = 16               # action_model.action_horizon (= future_action_window_size + 1)
    action_dim: int = 7             # action_model.action_dim
    state_dim: int = 7              # action_model.state_dim (state_encoder built when > 0)
    state_mode: str = "text"        # "text": QwenPI_v3 (state in the prompt, encoder unused);
                                    # "encoder": LayerwiseFM's optional state token
    denoise_steps: int = 4          # action_model.num_inference_timesteps
    timestep_buckets: int = 1000    # action_model.num_timestep_buckets
    max_seq_len: int = 1024         # action_model.max_seq_len (position_embedding rows)
    add_pos_embed: bool = True      # action_model.add_pos_embed
    interleave_self_attention: bool = False   # diffusion_model_cfg (released: False)
    use_canonical_forward: bool = True        # diffusion_model_cfg (DiT default True)
    positional_embeddings: str | None = None  # diffusion_model_cfg (PI_v3 default None)
    max_num_positional_embeddings: int = 512  # DiT default (only with "sinusoidal")
    time_proj_dim: int = 256        # TimestepEncoder: Timesteps(num_channels=256)
    time_freq_shift: float = 1.0    # Timesteps(downscale_freq_shift=1)
    time_max_period: float = 10000.0  # diffusers get_timestep_embedding max_period; also
                                      # the action encoder's log(10000)
    ff_mult: int = 4                # diffusers FeedForward mult
    decoder_hidden: int = 1024      # action_decoder = MLP(hidden_dim=1024)
    state_hidden: int = 1024        # state_encoder = MLP(hidden_dim=1024 default)
    dit_output_dim: int = 26        # diffusion_model_cfg.output_dim (proj_out_2, unused at
                                    # inference). DiT default 26: with it the head has exactly
                                    # the 538,678,305 parameters QwenPI_v3.py's docstring lists
    norm_eps: float = 1e-5          # DiT norm_eps (norm3); AdaLayerNorm's own default 1e-5
    projector_eps: float = 1e-5     # nn.LayerNorm default in project_layers

    def __post_init__(self):
        if self.num_heads * self.head_dim != self.width:
            raise ValueError(f"PI_v3 head width {self.width} != num_heads {self.num_heads} x "
                             f"head_dim {self.head_dim}")
        if self.state_mode not in STATE_MODES:
            raise ValueError(f"unknown state_mode {self.state_mode!r}; expected one of {STATE_MODES}")
        if self.state_mode == "encoder" and self.state_dim <= 0:
            raise ValueError("state_mode 'encoder' needs state_dim > 0")
        if self.positional_embeddings not in (None, "sinusoidal"):
            raise ValueError(f"unsupported positional_embeddings {self.positional_embeddings!r}")
        if self.width % 2 or self.time_proj_dim % 2:
            raise ValueError("width and time_proj_dim must be even")
        if min(self.depth, self.future_tokens, self.horizon, self.action_dim, self.denoise_steps) < 1:
            raise ValueError("depth, future_tokens, horizon, action_dim, denoise_steps must be >= 1")
        if self.horizon > self.max_seq_len:
            raise ValueError(f"horizon {self.horizon} exceeds max_seq_len {self.max_seq_len}")

    def block_is_cross(self, idx: int) -> bool:
        """DiT.forward: block idx self-attends iff odd, interleaved and canonical."""
        return not (idx % 2 == 1 and self.interleave_self_attention and self.use_canonical_forward)

    def block_built_cross(self, idx: int) -> bool:
        """DiT.__init__: odd blocks are built without cross_attention_dim when interleaved."""
        return not (idx % 2 == 1 and self.interleave_self_attention)

    rtc_modes = ("guided",)      # one flow time per chunk (AdaLayerNorm): no trained RTC
    head_name = "PI_v3"

    @property
    def tokens(self) -> int:
        """Head tokens per chunk (no state token): future tokens + horizon actions."""
        return self.future_tokens + self.horizon

    @property
    def reads(self) -> str:
        """What of the shared prefix it reads (the engine keeps them in KVPool.hidden)."""
        return "hidden_states"

    def build(self, backbone) -> "PIv3Head":
        """The head module, checked against the backbone's DecoderConfig it reads."""
        if self.backbone_hidden != backbone.width or self.depth > backbone.depth + 1:
            raise ValueError(f"the PI_v3 head reads {self.depth} layers of width {self.backbone_hidden}; "
                             f"the backbone has {backbone.depth} (+ embeddings) of width {backbone.width}")
        return PIv3Head(self)

    @classmethod
    def from_hf_dict(cls, config: dict, **overrides) -> "PIv3HeadConfig":
        """From the checkpoint's config.json (StarVLA's training config: `framework.qwenvl`,
        `framework.action_model`, `framework.action_model.diffusion_model_cfg`; the whole
        file or its `framework` part). Runtime-filled DiT fields (input_embedding_dim,
        num_layers, num_attention_heads) are used when saved, else derived the way
        Qwen_PI_v3.__init__ does. Missing required keys raise KeyError naming them."""
        fw = config.get("framework", config)
        if "action_model" not in fw:
            raise KeyError("StarVLA config has no 'framework.action_model'")
        am = fw["action_model"]
        dm = am.get("diffusion_model_cfg") or {}
        qv = fw.get("qwenvl") or {}
        if "action_dim" not in am:
            raise KeyError("StarVLA config has no 'framework.action_model.action_dim'")
        if "action_horizon" in am:
            horizon = int(am["action_horizon"])
        elif "future_action_window_size" in am:
            horizon = int(am["future_action_window_size"]) + 1
        else:
            raise KeyError("StarVLA config has no 'framework.action_model.action_horizon' "
                           "(or 'future_action_window_size')")
        backbone = int(qv.get("vl_hidden_dim", cls.backbone_hidden))
        width = dm.get("input_embedding_dim") or dm.get("action_dit_hidden_dim") or backbone
        width = int(width)
        head_dim = int(dm.get("attention_head_dim") or 64)
        heads = int(dm.get("num_attention_heads") or width // head_dim)
        depth = int(dm.get("num_layers") or qv.get("num_vl_layers") or cls.depth)
        values = dict(depth=depth, width=width, num_heads=heads, head_dim=head_dim,
                      backbone_hidden=backbone, horizon=horizon,
                      action_dim=int(am["action_dim"]),
                      state_dim=int(am.get("state_dim") or 0),
                      interleave_self_attention=bool(dm.get("interleave_self_attention", False)),
                      use_canonical_forward=bool(dm.get("use_canonical_forward", True)),
                      positional_embeddings=dm.get("positional_embeddings", None))
        for key, name in (("num_inference_timesteps", "denoise_steps"),
                          ("num_timestep_buckets", "timestep_buckets"),
                          ("num_target_vision_tokens", "future_tokens"),
                          ("max_seq_len", "max_seq_len")):
            if am.get(key) is not None:
                values[name] = int(am[key])
        if "add_pos_embed" in am:
            values["add_pos_embed"] = bool(am["add_pos_embed"])
        for key, name, kind in (("norm_eps", "norm_eps", float),
                                ("output_dim", "dit_output_dim", int),
                                ("max_num_positional_embeddings", "max_num_positional_embeddings", int)):
            if dm.get(key) is not None:
                values[name] = kind(dm[key])
        if values["state_dim"] <= 0:
            values["state_dim"] = 0
        check_fields(cls, overrides, TypeError)
        values.update(overrides)
        return cls(**values)


STARVLA_PI = Qwen3VLModelConfig(name="starvla-pi", vision=VISION_4B, backbone=TEXT_4B, expert=PIv3HeadConfig(),
                                special=QWEN_SPECIAL)

STARVLA_CPU = Qwen3VLModelConfig(
    name="starvla-cpu", vision=VISION_CPU, backbone=TEXT_CPU,
    expert=PIv3HeadConfig(depth=12, width=256, num_heads=4, head_dim=64, backbone_hidden=512, decoder_hidden=256),
    special=QWEN_SPECIAL, max_prompt_tokens=100,
)

PROFILES = {c.name: c for c in (STARVLA_PI, STARVLA_CPU)}
