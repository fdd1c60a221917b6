"""The action experts' sampling under a Real-Time Chunking guide (engine/rtc.py).

Time convention (pi0.5's expert): flow time t from 1 (noise) to 0 (actions), Euler x <- x + dt v with
dt = -1/steps, v ~ noise - actions, so the clean estimate is x0_hat = x - t v.

guided (training-free, arXiv 2506.07339): at every step
    err = (Y - x0_hat) * W,   g = (d x0_hat / d x)^T err   (one backward pass),
    v'  = v - w(t) g,         w(t) = min(beta, (t^2 + (1 - t)^2) / (t (1 - t))).
Sign: with dt < 0, x + dt v' = x + dt v + |dt| w g, and g = err - t (dv/dx)^T err ~ err,
so x0_hat moves by about |dt| w err: toward Y (for v independent of x exactly that:
x0_hat' = x0_hat + |dt| w err). The paper, with its time running noise -> data and
dt > 0, writes the same as v + w g; LeRobot's RTCProcessor for pi0/pi05 (tau = 1 - t)
has x - t v and v - w g, as here.
Xiaomi-Robotics-0's and StarVLA PI_v3's heads run their time the other way (0 -> 1):
_guided_forward_time.
trained (arXiv 2512.05964): the first d tokens are the prefix itself, conditioned with flow
time 0, at every step; the other tokens integrate as usual; no backward pass.

Neither mode writes the pool: the prefix K/V are read as detached views and the action
tokens' own K/V are concatenated locally (PrefixCacheView), so no value that requires
grad can reach the pool and padding past the prefix (ChunkStep's buckets) is never read.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from ..rtc import RTCGuide, guidance_weight
from .layers import packed_groups


class PrefixCacheView:
    """CacheView's interface (write_and_read) over one layer: the prefix K/V [0, prefix_len)
    of `slot`, detached, with the action tokens' K/V appended locally instead of written."""

    def __init__(self, k_layer: torch.Tensor, v_layer: torch.Tensor, slot: int, prefix_len: int):
        self.k = k_layer[slot:slot + 1, :, :prefix_len].detach()
        self.v = v_layer[slot:slot + 1, :, :prefix_len].detach()

    def write_and_read(self, k: torch.Tensor, v: torch.Tensor):
        return torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)


@contextmanager
def _dense_products(module):
    """Hide the oneDNN-blocked weight copies of `module`'s Packed groups: oneDNN's linear has
    no autograd formula (a backward through it silently yields no gradient), the dense
    matrix product does. Restored on exit; the expert is not used concurrently."""
    groups = [(g, g.blocked) for g in packed_groups(module)]
    try:
        for g, _ in groups:
            g.blocked = None
        yield
    finally:
        for g, blocked in groups:
            g.blocked = blocked


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
    with torch.inference_mode(False), torch.enable_grad(), _dense_products(expert):
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


def _check_guide(guide: RTCGuide, noise: torch.Tensor, head_cfg) -> None:
    """ValueError for a guide the head cannot run (its cfg.rtc_modes) or one wider than its actions."""
    if guide.config.mode not in head_cfg.rtc_modes:
        raise ValueError(f"RTC mode {guide.config.mode!r} is not available for the {head_cfg.head_name} head (it "
                         f"conditions the whole chunk on one time): use rtc_mode {' or '.join(head_cfg.rtc_modes)}")
    if guide.prefix.shape[1] > noise.shape[2]:
        raise ValueError(f"RTC prefix has {guide.prefix.shape[1]} columns, the model's actions {noise.shape[2]}")


def _guided_forward_time(velocity, noise: torch.Tensor, times, dt: float, guide: RTCGuide) -> torch.Tensor:
    """The guided Euler loop of a head whose flow time runs from 0 (noise) to 1 (actions),
    dt = +1/steps, v = actions - noise: the clean estimate is x0_hat = x + (1 - t) v and
    the paper's own convention applies as written, v' = v + w(t) g with
    g = (d x0_hat / d x)^T err (w is symmetric in t and 1 - t). `velocity(x, k)` is step
    k's velocity; the caller has left inference mode and enabled grad."""
    horizon = noise.shape[1]
    rows, cols = min(guide.rows, horizon), guide.prefix.shape[1]
    target = guide.prefix[:rows].to(noise.device, noise.dtype).clone()
    w_rows = guide.weights(horizon)[:rows, None].to(noise.device, noise.dtype)
    x = noise.detach().clone()
    for k, t in enumerate(times):
        x.requires_grad_(True)
        v = velocity(x, k)
        x0_hat = x + (1.0 - t) * v
        err = torch.zeros_like(x0_hat)          # rows and columns past the prefix: no target
        err[0, :rows, :cols] = (target - x0_hat.detach()[0, :rows, :cols]) * w_rows
        (g,) = torch.autograd.grad(x0_hat, x, grad_outputs=err)
        v = v.detach() + guidance_weight(t, guide.config.beta) * g
        x = (x.detach() + dt * v).detach()
    return x


def sample_xr0_guided(head, noise: torch.Tensor, state: torch.Tensor, action_mask, pool, slot: int,
                      prefix_len: int, prefix_next_position: int, guide: RTCGuide) -> torch.Tensor:
    """Xiaomi-Robotics-0's chunk [1, H, D] (model/xr0_head.py) under a guided RTC guide
    (_guided_forward_time). Trained RTC needs per-token time conditioning, which XR-0's
    AdaLN-Zero (one time per chunk) does not have. Reads the prefix K/V as detached views;
    writes nothing."""
    _check_guide(guide, noise, head.cfg)
    from .xr0_head import rope_tables

    horizon = noise.shape[1]
    first = head.first_backbone_layer(len(pool.k))
    caches = [PrefixCacheView(pool.k[first + i], pool.v[first + i], slot, prefix_len) for i in range(head.cfg.depth)]
    with torch.inference_mode(False), torch.enable_grad(), _dense_products(head):
        dev, dtype = noise.device, noise.dtype
        rope = tuple(r.clone() for r in rope_tables(head.token_positions(prefix_next_position, horizon, dev),
                                                      head.cfg.head_dim, head.cfg.rope_theta, dtype))
        mask = head.attention_mask(prefix_len, horizon, dev).clone()
        with torch.no_grad():       # nothing x-independent needs a graph
            dt, ts, layer_mods = head.schedule()
            layer_mods = [m.clone() for m in layer_mods]
            state_tokens = head.state_projector(state.reshape(1, 1, head.cfg.state_dim).to(dtype)).clone()
        keep = head.dim_mask(action_mask, 1, dev, dtype).clone()

        def velocity(x, k):
            return head.velocity(x, state_tokens, keep, [m[k] for m in layer_mods], rope, caches, mask)

        return _guided_forward_time(velocity, noise, [float(v) for v in ts], dt, guide)


def sample_piv3_guided(head, noise: torch.Tensor, layer_hidden: torch.Tensor, guide: RTCGuide) -> torch.Tensor:
    """StarVLA QwenPI_v3's chunk [1, H, D] (model/pi_v3_head.py) under a guided RTC guide
    (_guided_forward_time: its flow also runs t = k / N from 0 to 1, v = action - noise).
    `layer_hidden` [L + 1, 1, T, W]: the pool's per-layer hidden states of the prefix, read
    in place; the cross-attention K/V of the projected layers are computed once, without a
    graph, since they do not depend on x. One time per chunk again: guided only."""
    from .pi_v3_head import bucket_schedule

    _check_guide(guide, noise, head.cfg)
    steps = head.cfg.denoise_steps
    with torch.inference_mode(False), torch.enable_grad(), _dense_products(head):
        with torch.no_grad():       # outside inference mode: normal tensors autograd may save
            prepared = head.prepare(layer_hidden)
        buckets = bucket_schedule(steps, head.cfg.timestep_buckets)
        x = noise.to(head.action_model.future_tokens.weight.dtype)
        return _guided_forward_time(lambda x, k: head.velocity(x, buckets[k], prepared), x,
                                    [k / float(steps) for k in range(steps)], 1.0 / steps, guide)


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
