"""StarVLA QwenPI_v3's DiT, the modules of the checkpoint's `action_model.*`: the two time
sinusoids, AdaLayerNorm, Attention, FeedForward, the blocks, DiT and ActionModel. Apart from
head.py (PIv3Head: which layers it reads, its inputs, sampling), whose docstring gives the
formulas and sources these follow."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# The head's config (head.PIv3HeadConfig), read field by field: naming its class here would
# tie this module back to head.py, which builds these blocks.
HeadConfig = object


# ---- the two sinusoids ------------------------------------------------------------
def timestep_proj(buckets: torch.Tensor, dim: int, shift: float = 1.0,
                  max_period: float = 10000.0) -> torch.Tensor:
    """diffusers Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=shift):
    [cos(b f), sin(b f)], f_j = exp(-ln(max_period) j / (dim/2 - shift)), float32."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32,
                                                           device=buckets.device) / (half - shift))
    args = buckets.float()[..., None] * freqs
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def action_time_encoding(buckets: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """ActionEncoder's SinusoidalPositionalEncoding: [sin(b g), cos(b g)],
    g_j = exp(-ln(max_period) j / (dim/2)), float32."""
    half = dim // 2
    freqs = torch.exp(-torch.arange(half, dtype=torch.float32, device=buckets.device)
                      * (math.log(max_period) / half))
    args = buckets.float()[..., None] * freqs
    return torch.cat([torch.sin(args), torch.cos(args)], dim=-1)


def sinusoidal_table(length: int, dim: int) -> torch.Tensor:
    """diffusers SinusoidalPositionalEmbedding's pe [1, length, dim]: sin on even
    channels, cos on odd, div = exp(-ln(1e4) * 2i / dim)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(1, length, dim)
    pe[0, :, 0::2] = torch.sin(pos * div)
    pe[0, :, 1::2] = torch.cos(pos * div)
    return pe


# ---- modules named as the checkpoint's state dict ---------------------------------
class MLP(nn.Module):
    """LayerwiseFM MLP: layer2(relu(layer1(x)))."""

    def __init__(self, d_in: int, hidden: int, d_out: int):
        super().__init__()
        self.layer1 = nn.Linear(d_in, hidden)
        self.layer2 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.layer2(F.relu(self.layer1(x)))


class ActionEncoder(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.max_period = cfg.time_max_period
        self.layer1 = nn.Linear(cfg.action_dim, cfg.width)
        self.layer2 = nn.Linear(2 * cfg.width, cfg.width)
        self.layer3 = nn.Linear(cfg.width, cfg.width)

    def forward(self, actions: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        """actions [B, H, A], buckets [B] (one time per row) -> [B, H, W]:
        layer3(swish(layer2(cat[layer1(a), tau(b)]))), swish(x) = x sigmoid(x) = SiLU."""
        a = self.layer1(actions)
        tau = action_time_encoding(buckets, a.shape[-1], self.max_period).to(a.dtype)
        x = torch.cat([a, tau[:, None].expand(-1, a.shape[1], -1)], dim=-1)
        return self.layer3(F.silu(self.layer2(x)))


class AdaLayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.linear = nn.Linear(dim, 2 * dim)

    def modulation(self, temb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """temb [B, W] -> scale, shift [B, 1, W] (chunk order: scale, then shift)."""
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=-1)
        return scale[:, None], shift[:, None]

    def forward(self, x, temb):
        scale, shift = self.modulation(temb)
        return F.layer_norm(x, (x.shape[-1],), eps=self.eps) * (1 + scale) + shift


class Attention(nn.Module):
    """diffusers Attention(bias=True, out_bias=True) with SDPA, scale 1/sqrt(head_dim)."""

    def __init__(self, cfg: HeadConfig, is_cross: bool):
        super().__init__()
        self.is_cross = is_cross
        self.heads, self.head_dim = cfg.num_heads, cfg.head_dim
        w = cfg.width
        self.to_q = nn.Linear(w, w)
        self.to_k = nn.Linear(w, w)      # cross_attention_dim = width (pre-projected encoder)
        self.to_v = nn.Linear(w, w)
        self.to_out = nn.ModuleList([nn.Linear(w, w), nn.Identity()])   # [Linear, Dropout]

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.to_k(context)), self.split(self.to_v(context))

    def forward(self, x, kv=None, mask=None):
        """x [B, T, W]; kv: precomputed (k, v) [B, heads, S, d] of the context, or None
        for self-attention over x; mask bool [B, 1, 1, S] (True = visible) or None."""
        k, v = self.kv(x) if kv is None else kv
        out = F.scaled_dot_product_attention(self.split(self.to_q(x)), k, v, attn_mask=mask,
                                             scale=1.0 / math.sqrt(self.head_dim))
        b, _, t, _ = out.shape
        return self.to_out[0](out.transpose(1, 2).reshape(b, t, -1))


class GELUProj(nn.Module):
    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    """diffusers FeedForward("gelu-approximate", final_dropout): net = [GELU(proj),
    Dropout, Linear, Dropout]."""

    def __init__(self, dim: int, mult: int):
        super().__init__()
        self.net = nn.ModuleList([GELUProj(dim, mult * dim), nn.Identity(),
                                  nn.Linear(mult * dim, dim), nn.Identity()])

    def forward(self, x):
        for m in self.net:
            x = m(x)
        return x


class SinusoidalPositionalEmbedding(nn.Module):
    def __init__(self, dim: int, length: int):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(length, dim))   # persistent, as diffusers

    def forward(self, x):
        return x + self.pe[:, : x.shape[1]].to(x.dtype)


class DiTBlock(nn.Module):
    """BasicTransformerBlock(norm_type="ada_norm"): the attention is cross when built
    with cross_attention_dim (it can still be run as self-attention, see DiT.forward)."""

    def __init__(self, cfg: HeadConfig, built_cross: bool):
        super().__init__()
        self.eps = cfg.norm_eps
        self.norm1 = AdaLayerNorm(cfg.width, 1e-5)      # AdaLayerNorm(dim): its default eps
        self.pos_embed = (SinusoidalPositionalEmbedding(cfg.width, cfg.max_num_positional_embeddings)
                          if cfg.positional_embeddings == "sinusoidal" else None)
        self.attn1 = Attention(cfg, built_cross)
        self.ff = FeedForward(cfg.width, cfg.ff_mult)

    def forward(self, x, temb, kv=None, mask=None):
        n = self.norm1(x, temb)
        if self.pos_embed is not None:
            n = self.pos_embed(n)
        x = x + self.attn1(n, kv, mask)
        return x + self.ff(F.layer_norm(x, (x.shape[-1],), eps=self.eps))


class TimestepEmbedding(nn.Module):
    def __init__(self, d_in: int, dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(d_in, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


class TimestepEncoder(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.dim, self.shift, self.max_period = cfg.time_proj_dim, cfg.time_freq_shift, cfg.time_max_period
        self.timestep_embedder = TimestepEmbedding(cfg.time_proj_dim, cfg.width)

    def forward(self, buckets: torch.Tensor) -> torch.Tensor:
        w = self.timestep_embedder.linear_1.weight
        return self.timestep_embedder(timestep_proj(buckets, self.dim, self.shift, self.max_period).to(w.dtype))


class DiT(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.timestep_encoder = TimestepEncoder(cfg)
        self.transformer_blocks = nn.ModuleList(DiTBlock(cfg, cfg.block_built_cross(i))
                                                for i in range(cfg.depth))
        # built by DiT, unused by the layer-wise head (return_pre_output=True);
        # norm_out is a LayerNorm without parameters
        self.proj_out_1 = nn.Linear(cfg.width, 2 * cfg.width)
        self.proj_out_2 = nn.Linear(cfg.width, cfg.dit_output_dim)


class ActionModel(nn.Module):
    """LayerwiseFlowmatchingActionHead's parameters (checkpoint prefix `action_model.`)."""

    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.model = DiT(cfg)
        self.state_encoder = MLP(cfg.state_dim, cfg.state_hidden, cfg.width) if cfg.state_dim > 0 else None
        self.action_encoder = ActionEncoder(cfg)
        self.action_decoder = MLP(cfg.width, cfg.decoder_hidden, cfg.action_dim)
        self.future_tokens = nn.Embedding(cfg.future_tokens, cfg.width)
        self.position_embedding = nn.Embedding(cfg.max_seq_len, cfg.width) if cfg.add_pos_embed else None
