"""pi0.5's action expert: per-layer weights joining the backbone's attention, flow matching.

Each expert layer i computes Q/K/V from the action tokens with its own weights, writes
its K/V just past the prefix in the frame's staging slot, and attends over
[prefix K/V of backbone layer i, its own K/V] as one contiguous view of the pool.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import DecoderConfig, ExpertConfig
from .decoder import Attention, CacheView
from .layers import AdaRMSNorm, GatedMLP, ada_rms_normalize

NORM_EPS = 1e-6


class ExpertLayer(nn.Module):
    def __init__(self, cfg: ExpertConfig, bb: DecoderConfig):
        super().__init__()
        self.input_layernorm = AdaRMSNorm(cfg.width, cfg.width, NORM_EPS)
        self.self_attn = Attention(cfg.width, bb.num_heads, bb.num_kv_heads, bb.head_dim)
        self.post_attention_layernorm = AdaRMSNorm(cfg.width, cfg.width, NORM_EPS)
        self.mlp = GatedMLP(cfg.width, cfg.mlp_dim, "gelu_tanh")

    def forward(self, x, cond, rope, cache: CacheView):
        scale, shift, gate = self.input_layernorm.modulation(cond)
        h = x + self.self_attn(self.input_layernorm.normalize(x, scale, shift), rope, cache, None) * gate
        scale, shift, gate = self.post_attention_layernorm.modulation(cond)
        return h + self.mlp(self.post_attention_layernorm.normalize(h, scale, shift)) * gate


class FinalAdaNorm(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.dense = nn.Linear(width, 3 * width)

    def forward(self, x, cond):
        scale, shift, _gate = self.dense(cond).chunk(3, dim=-1)
        return ada_rms_normalize(x, scale, shift, NORM_EPS)


def time_embedding(t: float, width: int, dtype=torch.float32) -> torch.Tensor:
    """Sinusoidal embedding of the flow time (periods from 4e-3 to 4.0), computed in float64."""
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    angle = 2 * math.pi * torch.tensor(t, dtype=torch.float64) / period
    return torch.cat([angle.sin(), angle.cos()]).to(dtype)


class ActionExpert(nn.Module):
    def __init__(self, cfg: ExpertConfig, bb: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(ExpertLayer(cfg, bb) for _ in range(bb.depth))
        self.norm = FinalAdaNorm(cfg.width)
        self.action_in_proj = nn.Linear(cfg.action_dim, cfg.width)
        self.action_out_proj = nn.Linear(cfg.width, cfg.action_dim)
        self.time_mlp_in = nn.Linear(cfg.width, cfg.width)
        self.time_mlp_out = nn.Linear(cfg.width, cfg.width)

    def condition(self, t: float) -> torch.Tensor:
        w = self.time_mlp_in.weight
        emb = time_embedding(t, self.cfg.width).to(device=w.device, dtype=w.dtype)
        return nn.functional.silu(self.time_mlp_out(nn.functional.silu(self.time_mlp_in(emb))))

    def velocity(self, x_t: torch.Tensor, t: float, pool, slot: int, prefix_len: int,
                 rope) -> torch.Tensor:
        """x_t [1, H, D] -> velocity [1, H, D]; reads backbone prefix K/V of `slot`."""
        cond = self.condition(t)
        h = self.action_in_proj(x_t)
        horizon = x_t.shape[1]
        for i, layer in enumerate(self.layers):
            cache = CacheView(pool.k[i], pool.v[i], slice(slot, slot + 1), prefix_len,
                              prefix_len + horizon)
            h = layer(h, cond, rope, cache)
        return self.action_out_proj(self.norm(h, cond))

    def sample(self, noise: torch.Tensor, pool, slot: int, prefix_len: int, rope_tables,
               steps: int) -> torch.Tensor:
        """Euler-integrate the flow from noise at t=1 to t=0 (t_k = float32(1 + k*dt))."""
        positions = torch.arange(prefix_len, prefix_len + noise.shape[1], device=noise.device)
        rope = rope_tables.tables(positions[None], noise.dtype)
        dt = -1.0 / steps
        x = noise
        for k in range(steps):
            t = float(torch.tensor(1.0 + k * dt, dtype=torch.float32))
            x = x + dt * self.velocity(x, t, pool, slot, prefix_len, rope)
        return x
