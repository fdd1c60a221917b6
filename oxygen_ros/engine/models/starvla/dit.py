"""StarVLA QwenPI_v3's DiT, the modules of the checkpoint's `action_model.*`: the two time
sinusoids, AdaLayerNorm, Attention, FeedForward, the blocks, DiT and ActionModel. Apart from
head.py (PIv3Head: which layers it reads, its inputs, sampling), whose docstring gives the
formulas and sources these follow.

Each module takes plain numbers (widths, heads, eps), as diffusers' blocks do: head.py reads
them off the head's config (configuration.PIv3HeadConfig) and builds these."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


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
    def __init__(self, action_dim: int, width: int, max_period: float):
        super().__init__()
        self.max_period = max_period
        self.layer1 = nn.Linear(action_dim, width)
        self.layer2 = nn.Linear(2 * width, width)
        self.layer3 = nn.Linear(width, width)

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

    def __init__(self, width: int, num_heads: int, head_dim: int, is_cross: bool):
        super().__init__()
        self.is_cross = is_cross
        self.heads, self.head_dim = num_heads, head_dim
        w = width
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

    def __init__(self, width: int, num_heads: int, head_dim: int, built_cross: bool, *, ff_mult: int,
                 norm_eps: float, positional_embeddings: str | None, max_num_positional_embeddings: int):
        super().__init__()
        self.eps = norm_eps
        self.norm1 = AdaLayerNorm(width, 1e-5)      # AdaLayerNorm(dim): its default eps
        self.pos_embed = (SinusoidalPositionalEmbedding(width, max_num_positional_embeddings)
                          if positional_embeddings == "sinusoidal" else None)
        self.attn1 = Attention(width, num_heads, head_dim, built_cross)
        self.ff = FeedForward(width, ff_mult)

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
    def __init__(self, proj_dim: int, width: int, freq_shift: float, max_period: float):
        super().__init__()
        self.dim, self.shift, self.max_period = proj_dim, freq_shift, max_period
        self.timestep_embedder = TimestepEmbedding(proj_dim, width)

    def forward(self, buckets: torch.Tensor) -> torch.Tensor:
        w = self.timestep_embedder.linear_1.weight
        return self.timestep_embedder(timestep_proj(buckets, self.dim, self.shift, self.max_period).to(w.dtype))


class DiT(nn.Module):
    """built_cross: per block, whether it is built with cross-attention (one per block);
    the time_* numbers are TimestepEncoder's, the rest each DiTBlock's."""

    def __init__(self, width: int, num_heads: int, head_dim: int, built_cross: tuple[bool, ...], *,
                 output_dim: int, time_proj_dim: int, time_freq_shift: float, time_max_period: float,
                 ff_mult: int, norm_eps: float, positional_embeddings: str | None,
                 max_num_positional_embeddings: int):
        super().__init__()
        self.timestep_encoder = TimestepEncoder(time_proj_dim, width, time_freq_shift, time_max_period)
        self.transformer_blocks = nn.ModuleList(
            DiTBlock(width, num_heads, head_dim, cross, ff_mult=ff_mult, norm_eps=norm_eps,
                     positional_embeddings=positional_embeddings,
                     max_num_positional_embeddings=max_num_positional_embeddings)
            for cross in built_cross)
        # built by DiT, unused by the layer-wise head (return_pre_output=True);
        # norm_out is a LayerNorm without parameters
        self.proj_out_1 = nn.Linear(width, 2 * width)
        self.proj_out_2 = nn.Linear(width, output_dim)


class ActionModel(nn.Module):
    """LayerwiseFlowmatchingActionHead's parameters (checkpoint prefix `action_model.`) around
    its DiT `model` (built first, so seeded random weights come out as StarVLA's order).
    state_dim 0: no state encoder; max_seq_len 0: no position embedding."""

    def __init__(self, model: DiT, *, width: int, action_dim: int, state_dim: int, state_hidden: int,
                 decoder_hidden: int, future_tokens: int, max_seq_len: int, time_max_period: float):
        super().__init__()
        self.model = model
        self.state_encoder = MLP(state_dim, state_hidden, width) if state_dim > 0 else None
        self.action_encoder = ActionEncoder(action_dim, width, time_max_period)
        self.action_decoder = MLP(width, decoder_hidden, action_dim)
        self.future_tokens = nn.Embedding(future_tokens, width)
        self.position_embedding = nn.Embedding(max_seq_len, width) if max_seq_len > 0 else None
