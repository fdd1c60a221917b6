"""Seeded random weights with unit-scale activations: the tests' models, the random-weight
profiles and the placeholder parts of `smol` (every family builds on it)."""
from __future__ import annotations

import math

import torch
from torch import nn


@torch.no_grad()
def init_random(model: nn.Module, seed: int) -> nn.Module:
    """Seeded random weights with unit-scale activations (tests, tiny and placeholder parts)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            fan_in = p[0].numel()
            p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
        elif name.endswith("bias"):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        elif "norm" in name and p.dim() == 1 and (p == 0).all():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)   # gemma (1 + w) norms
    return model
