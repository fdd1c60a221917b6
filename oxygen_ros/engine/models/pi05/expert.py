"""pi0.5's action expert: per-layer weights joining the backbone's attention, flow matching.

Each expert layer i computes Q/K/V from the action tokens with its own weights, writes
its K/V just past the prefix in the frame's staging slot, and attends over
[prefix K/V of backbone layer i, its own K/V] as one contiguous view of the pool.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ...config import DecoderConfig
from .configuration import ExpertConfig
from ...layers.decoder import Attention, CacheView
from ...layers.blocks import AdaRMSNorm, GatedMLP, ada_rms_normalize, norm_terms
from .rtc_sampling import sample_with_guide
from ...transfer import to_device
from ... import native

NORM_EPS = 1e-6


class ExpertLayer(nn.Module):
    def __init__(self, cfg: ExpertConfig, bb: DecoderConfig):
        super().__init__()
        self.input_layernorm = AdaRMSNorm(cfg.width, cfg.width, NORM_EPS)
        self.self_attn = Attention(cfg.width, bb.num_heads, bb.num_kv_heads, bb.head_dim)
        self.post_attention_layernorm = AdaRMSNorm(cfg.width, cfg.width, NORM_EPS)
        self.mlp = GatedMLP(cfg.width, cfg.mlp_dim, "gelu_tanh")

    def modulations(self, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cond [N, W] (one row per denoise step) -> the norms' float32 terms [N, 4, W]
        (1 + scale, shift of the attention norm, then of the MLP norm) and the residual
        gates [N, 2, W]."""
        scale1, shift1, gate1 = self.input_layernorm.dense(cond).unflatten(-1, (3, -1)).unbind(1)
        scale2, shift2, gate2 = self.post_attention_layernorm.dense(cond).unflatten(-1, (3, -1)).unbind(1)
        norms = torch.cat([norm_terms(scale1, shift1), norm_terms(scale2, shift2)], dim=1)
        return norms, torch.stack([gate1, gate2], dim=1)

    def forward(self, x, norms, gates, rope, cache: CacheView, mask=None):
        y = ada_rms_normalize(x, norms[0], norms[1], self.input_layernorm.eps)
        h = torch.addcmul(x, self.self_attn(y, rope, cache, mask), gates[0])
        y = ada_rms_normalize(h, norms[2], norms[3], self.post_attention_layernorm.eps)
        return torch.addcmul(h, self.mlp(y), gates[1])


class FinalAdaNorm(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.dense = nn.Linear(width, 3 * width)

    def modulations(self, cond: torch.Tensor) -> torch.Tensor:
        """cond [N, W] -> float32 [N, 2, W]: 1 + scale and shift (the gate is unused)."""
        scale, shift, _ = self.dense(cond).unflatten(-1, (3, -1)).unbind(1)
        return norm_terms(scale, shift)

    def forward(self, x, terms):
        return ada_rms_normalize(x, terms[0], terms[1], NORM_EPS)


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

    def condition(self, ts: list[float]) -> torch.Tensor:
        """The time conditioning of every denoise step at once: [N, W]."""
        w = self.time_mlp_in.weight
        emb = to_device(torch.stack([time_embedding(t, self.cfg.width) for t in ts]), w.device, w.dtype)
        return nn.functional.silu(self.time_mlp_out(nn.functional.silu(self.time_mlp_in(emb))))

    def schedule(self, steps: int) -> tuple[float, list, torch.Tensor]:
        """The Euler step dt and the adaptive norms' terms for every denoise step
        (t_k = float32(1 + k*dt)): dt, per layer (norms [N, 4, W], gates [N, 2, W]), and
        the final norm's [N, 2, W]. They depend on t only, so all steps' are computed up
        front in one matmul per layer: the modulation weights are read once per chunk
        instead of once per step. The host-side work (the time embedding) is all here."""
        dt = -1.0 / steps
        ts = [float(torch.tensor(1.0 + k * dt, dtype=torch.float32)) for k in range(steps)]
        cond = self.condition(ts)
        return dt, [layer.modulations(cond) for layer in self.layers], self.norm.modulations(cond)

    def sample(self, noise: torch.Tensor, pool, slot: int, prefix_len: int, rope_tables,
               steps: int, fused: bool = False, rtc=None) -> torch.Tensor:
        """Euler-integrate the flow from noise at t=1 to t=0, the action tokens' K/V just
        past the prefix in `slot`. `fused` runs the whole loop as one native call
        (engine/native/expert.cpp, same kernels, bitwise the same outputs) where it is
        built (CPU). `rtc` (an engine.rtc.RTCGuide) that guides anything runs the eager
        RTC sampling instead (rtc_sampling.py: it reads the prefix and writes nothing)."""
        horizon = noise.shape[1]
        positions = torch.arange(prefix_len, prefix_len + horizon, device=noise.device)
        rope = rope_tables.tables(positions[None], noise.dtype)
        schedule = self.schedule(steps)
        if rtc is not None and rtc.active(horizon):
            return sample_with_guide(self, noise, schedule, rope, pool, slot, prefix_len, rtc)
        if fused and noise.device.type == "cpu" and native.available():
            out = self._sample_native(noise, pool, slot, prefix_len, rope, *schedule)
            if out is not None:
                return out
        return self.integrate(noise, schedule, rope, pool, slot, prefix_len)

    def integrate(self, noise: torch.Tensor, schedule, rope, pool, slot: int, write_at: int,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
        """The denoise loop proper, device work only (one CUDA graph can hold it:
        chunk_graphs.py). The action tokens' K/V go to positions [write_at, write_at + H)
        of `slot`; they attend over [0, write_at + H) under `mask` (None: all of it).
        `slot` may be a slice of B slots for noise [B, H, D] (several prefixes' chunks in
        one batch: engine/fleet_batch.py), row i in the slice's i-th slot."""
        dt, layer_mods, final_mods = schedule
        horizon = noise.shape[1]
        rows = slice(slot, slot + 1) if isinstance(slot, int) else slot
        caches = [CacheView(pool.k[i], pool.v[i], rows, write_at, write_at + horizon)
                  for i in range(len(self.layers))]
        x = noise
        for k in range(final_mods.shape[0]):
            step_mods = [(norms[k], gates[k]) for norms, gates in layer_mods]
            x = x + dt * self.velocity(x, step_mods, final_mods[k], rope, caches, mask)
        return x

    def velocity(self, x: torch.Tensor, layer_terms, final_terms, rope, caches, mask=None) -> torch.Tensor:
        """One denoise step's velocity for the action tokens x [B, H, D]: layer_terms per
        layer (norms [4, ..., W], gates [2, ..., W]) and final_terms [2, ..., W] of this step
        (the "..." may be per token: RTC's trained mode), each layer's K/V through `caches`."""
        h = self.action_in_proj(x)
        for layer, (norms, gates), cache in zip(self.layers, layer_terms, caches):
            h = layer(h, norms, gates, rope, cache, mask)
        return self.action_out_proj(self.norm(h, final_terms))

    def _sample_native(self, noise, pool, slot, prefix_len, rope, dt, layer_mods, final_mods):
        """The whole sampling in one native call; None where the layers are not what
        expert.cpp computes (unpacked or replaced weights, biases, another activation,
        q/k norms): the eager path then runs."""
        params = [self.action_in_proj.weight, self.action_in_proj.bias, self.action_out_proj.weight,
                  self.action_out_proj.bias, final_mods, *rope]
        blocked = []
        for layer, (norms, gates) in zip(self.layers, layer_mods):
            groups = (layer.self_attn._qkv, layer.self_attn._o, layer.mlp._gate_up, layer.mlp._down)
            operands = [g.operands() for g in groups]
            if None in operands or layer.mlp.act_name != "gelu_tanh" or layer.self_attn.q_norm is not None:
                return None
            params += [norms, gates, *(matrix for matrix, _ in operands)]
            blocked += [_NOT_BLOCKED if copy is None else copy for _, copy in operands]
        attn = self.layers[0].self_attn
        depth = len(self.layers)
        return torch.ops.oxygen_native.expert_sample(
            noise, params, blocked, [pool.k[i] for i in range(depth)], [pool.v[i] for i in range(depth)],
            slot, prefix_len, attn.num_heads, attn.num_kv_heads, attn.head_dim, NORM_EPS, dt)


_NOT_BLOCKED = torch.empty(0)
