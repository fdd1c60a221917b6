"""pi0.5's action expert under a Real-Time Chunking guide, both modes (layers/rtc_guidance.py
has the conventions): guided (a backward pass per Euler step, time 1 -> 0) and trained
(the prefix tokens conditioned at flow time 0, per-token adaptive-norm terms)."""
from __future__ import annotations

import torch

from ...layers.rtc_guidance import PrefixCacheView
from ...rtc import RTCGuide, guidance_weight


def sample_with_guide(expert, noise: torch.Tensor, schedule, rope, pool, slot: int, prefix_len: int,
                      guide: RTCGuide) -> torch.Tensor:
    """The chunk [1, H, D] from `noise` [1, H, D] over the prefix K/V [0, prefix_len) of
    `slot`, guided by `guide` (mode guided or trained). The action tokens sit at positions
    prefix_len.. (their rope tables `rope`), right after the prefix."""
    dim = noise.shape[2]
    if guide.prefix.shape[1] > dim:
        raise ValueError(f"RTC prefix has {guide.prefix.shape[1]} columns, the model's actions {dim}")
    caches = [PrefixCacheView(pool.k[i], pool.v[i], slot, prefix_len) for i in range(len(expert.layers))]
    if guide.config.mode == "trained":
        return _sample_trained(expert, noise, schedule, rope, caches, guide)
    return _sample_guided(expert, noise, schedule, rope, caches, guide)


def _step_times(dt: float, steps: int) -> list[float]:
    # the same float32-rounded t_k = 1 + k dt the schedule's conditioning was computed at
    return [float(torch.tensor(1.0 + k * dt, dtype=torch.float32)) for k in range(steps)]


def _sample_guided(expert, noise, schedule, rope, caches, guide: RTCGuide) -> torch.Tensor:
    dt, layer_mods, final_mods = schedule
    horizon = noise.shape[1]
    rows, cols = min(guide.rows, horizon), guide.prefix.shape[1]
    # the engine samples under inference_mode, whose tensors autograd cannot save: leave
    # it, and clone what the forward multiplies x-dependent values by into normal tensors
    with torch.inference_mode(False), torch.enable_grad():
        layer_mods = [(norms.clone(), gates.clone()) for norms, gates in layer_mods]
        final_mods = final_mods.clone()
        rope = tuple(r.clone() for r in rope)
        target = guide.prefix[:rows].to(noise.device, noise.dtype).clone()
        w_rows = guide.weights(horizon)[:rows, None].to(noise.device, noise.dtype)
        x = noise.detach().clone()
        for k, t in enumerate(_step_times(dt, final_mods.shape[0])):
            x.requires_grad_(True)
            step_mods = [(norms[k], gates[k]) for norms, gates in layer_mods]
            v = expert.velocity(x, step_mods, final_mods[k], rope, caches)
            x0_hat = x - t * v
            err = torch.zeros_like(x0_hat)          # rows and columns past the prefix: no target
            err[0, :rows, :cols] = (target - x0_hat.detach()[0, :rows, :cols]) * w_rows
            (g,) = torch.autograd.grad(x0_hat, x, grad_outputs=err)
            v = v.detach() - guidance_weight(t, guide.config.beta) * g
            x = (x.detach() + dt * v).detach()
    return x


@torch.no_grad()
def _sample_trained(expert, noise, schedule, rope, caches, guide: RTCGuide) -> torch.Tensor:
    dt, layer_mods, final_mods = schedule
    horizon, dim = noise.shape[1], noise.shape[2]
    if guide.prefix.shape[1] != dim:
        raise ValueError(f"RTC trained mode needs prefix rows as wide as the model's actions ({dim}), "
                         f"got {guide.prefix.shape[1]}: the prefix tokens are set whole")
    d = guide.hard_rows(horizon)
    hard = (torch.arange(horizon, device=noise.device) < d)[:, None]      # [H, 1]
    prefix = guide.prefix[:d].to(noise.device, noise.dtype)
    # per-token time conditioning: the prefix tokens' adaptive-norm terms at t = 0
    cond0 = expert.condition([0.0])
    clean_mods = [layer.modulations(cond0) for layer in expert.layers]    # ([1, 4, W], [1, 2, W])
    clean_final = expert.norm.modulations(cond0)[0]

    def per_token(clean: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        # [J, W] terms of both times -> [J, H, W]: the clean ones on the prefix rows
        return torch.where(hard, clean[:, None, :], step[:, None, :])

    x = noise.clone()
    x[:, :d] = prefix
    for k in range(final_mods.shape[0]):
        step_mods = [(per_token(cn[0], norms[k]), per_token(cg[0], gates[k]))
                     for (cn, cg), (norms, gates) in zip(clean_mods, layer_mods)]
        v = expert.velocity(x, step_mods, per_token(clean_final, final_mods[k]), rope, caches)
        x = x + dt * v
        x[:, :d] = prefix                   # the prefix stays clean: only the rest integrates
    return x
