"""What every action expert's Real-Time Chunking sampling shares (engine/rtc.py): the
detached prefix view, the guide check and the guided Euler loop for heads whose flow time
runs 0 -> 1. Each family's sampler sits with its head (models/pi05/rtc_sampling.py;
XR0Head.sample_guided and PIv3Head.sample_guided in their heads). The backward passes go
through the packed products as they are (layers/blocks.Packed.matmul differentiates its
oneDNN-blocked product where autograd needs it), so no dense copy of a weight is kept.

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
guided_forward_time.
trained (arXiv 2512.05964): the first d tokens are the prefix itself, conditioned with flow
time 0, at every step; the other tokens integrate as usual; no backward pass.

Neither mode writes the pool: the prefix K/V are read as detached views and the action
tokens' own K/V are concatenated locally (PrefixCacheView), so no value that requires
grad can reach the pool and padding past the prefix (ChunkStep's buckets) is never read.
"""
from __future__ import annotations

import torch

from ..rtc import RTCGuide, guidance_weight


class PrefixCacheView:
    """CacheView's interface (write_and_read, visible, pass_targets) over one layer: the prefix K/V
    [0, prefix_len) of `slot`, detached, with the action tokens' K/V appended locally
    instead of written."""

    def __init__(self, k_layer: torch.Tensor, v_layer: torch.Tensor, slot: int, prefix_len: int):
        self.k = k_layer[slot:slot + 1, :, :prefix_len].detach()
        self.v = v_layer[slot:slot + 1, :, :prefix_len].detach()

    def write_and_read(self, k: torch.Tensor, v: torch.Tensor):
        return torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)

    def visible(self) -> None:      # the chunk's tokens attend under their mask, not by count
        return None

    def pass_targets(self, t: int) -> None:     # nothing is written to the pool
        return None


def check_guide(guide: RTCGuide, noise: torch.Tensor, head_cfg) -> None:
    """ValueError for a guide the head cannot run (its cfg.rtc_modes) or one wider than its actions."""
    if guide.config.mode not in head_cfg.rtc_modes:
        raise ValueError(f"RTC mode {guide.config.mode!r} is not available for the {head_cfg.head_name} head (it "
                         f"conditions the whole chunk on one time): use rtc_mode {' or '.join(head_cfg.rtc_modes)}")
    if guide.prefix.shape[1] > noise.shape[2]:
        raise ValueError(f"RTC prefix has {guide.prefix.shape[1]} columns, the model's actions {noise.shape[2]}")


def guided_forward_time(velocity, noise: torch.Tensor, times, dt: float, guide: RTCGuide) -> torch.Tensor:
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


