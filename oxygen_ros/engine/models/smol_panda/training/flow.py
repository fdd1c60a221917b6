"""The action expert trained by flow matching on stored prefix K/V (pi0's objective):
x_t = t * noise + (1 - t) * actions, target velocity noise - actions, t ~ 0.001 + 0.999 *
Beta(1.5, 1); the engine samples from t = 1 with Euler steps x += dt * v (expert.py).

`velocity` runs the engine's own ExpertLayer code on a batch of prefixes of different
lengths, each padded to the store's max_len with the padding masked out: the action tokens
see exactly their own prefix, at the positions the engine gives them (prefix length + i)."""
from __future__ import annotations

import math

import torch

from ....layers.decoder import CacheView


def time_embeddings(t: torch.Tensor, width: int) -> torch.Tensor:
    """expert.time_embedding for a batch of times [B] (float64 math, float32 out)."""
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    angle = 2 * math.pi * t.to(torch.float64)[:, None] / period
    return torch.cat([angle.sin(), angle.cos()], dim=-1).float()


def velocity(expert, rope_tables, x: torch.Tensor, t: torch.Tensor, ks, vs, lengths: torch.Tensor,
             span: int | None = None) -> torch.Tensor:
    """x [B, H, D] at flow times t [B]; ks, vs per layer [B, kvh, L, d] (prefixes padded to L);
    lengths [B] valid prefix tokens. Returns the velocity [B, H, D]. span=L given: ks, vs
    already hold H more positions (KVStore.batch(extra=H)), which the action tokens' K/V
    overwrite (so each call needs fresh tensors); None: they are copied with room added."""
    b, h, _ = x.shape
    roomy = span is not None
    span = span if roomy else ks[0].shape[2]
    emb = time_embeddings(t, expert.cfg.width)
    cond = torch.nn.functional.silu(expert.time_mlp_out(torch.nn.functional.silu(expert.time_mlp_in(emb))))
    layer_terms = []
    for layer in expert.layers:
        norms, gates = layer.modulations(cond)                    # [B, 4, W], [B, 2, W]
        layer_terms.append((norms.transpose(0, 1)[:, :, None], gates.transpose(0, 1)[:, :, None]))
    final = expert.norm.modulations(cond).transpose(0, 1)[:, :, None]
    positions = lengths[:, None] + torch.arange(h)[None]
    rope = rope_tables.tables(positions, x.dtype)
    caches = []
    for k, v in zip(ks, vs):
        if not roomy:
            pad = k.new_zeros(b, k.shape[1], h, k.shape[3])
            k, v = torch.cat([k, pad], 2), torch.cat([v, pad.clone()], 2)
        caches.append(CacheView(k, v, slice(0, b), span, span + h))
    j = torch.arange(span + h)
    mask = ((j[None] < lengths[:, None]) | (j[None] >= span))[:, None, None, :].expand(b, 1, h, span + h)
    return expert.velocity(x, layer_terms, final, rope, caches, mask)


def flow_loss(expert, rope_tables, actions, ks, vs, lengths, gen: torch.Generator, beta=(1.5, 1.0),
              span: int | None = None):
    b = actions.shape[0]
    noise = torch.randn(actions.shape, generator=gen)
    t = torch.distributions.Beta(*beta).sample((b,)) * 0.999 + 0.001
    tt = t[:, None, None]
    x_t = tt * noise + (1 - tt) * actions
    v = velocity(expert, rope_tables, x_t, t, ks, vs, lengths, span)
    return torch.nn.functional.mse_loss(v, noise - actions)


@torch.no_grad()
def sample(expert, rope_tables, noise, ks, vs, lengths, steps: int) -> torch.Tensor:
    """Euler from t = 1 to 0 as the engine does (t_k = float32(1 + k * dt))."""
    dt = -1.0 / steps
    x = noise
    for k in range(steps):
        t = torch.full((x.shape[0],), float(torch.tensor(1.0 + k * dt, dtype=torch.float32)))
        x = x + dt * velocity(expert, rope_tables, x, t, ks, vs, lengths)
    return x


def zero_init(expert) -> None:
    """adaLN-Zero (DiT): the adaptive norms' modulation and the output start at zero, so
    every layer starts as the identity and the first velocity is zero."""
    with torch.no_grad():
        for layer in expert.layers:
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.dense.weight.zero_()
                norm.dense.bias.zero_()
        expert.norm.dense.weight.zero_()
        expert.norm.dense.bias.zero_()
        expert.action_out_proj.weight.zero_()
        expert.action_out_proj.bias.zero_()
