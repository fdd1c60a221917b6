"""SigLIP-style vision encoder with the projector to the backbone width."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .configuration import VisionConfig
from ...layers.blocks import Packed, tiled_rows


class VisionAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)
        self._qkv, self._out = Packed(self.q_proj, self.k_proj, self.v_proj), Packed(self.out_proj)

    def forward(self, x):
        b, t, w = x.shape
        d = w // self.heads
        q, k, v = self._qkv.matmul(x).unflatten(-1, (3, self.heads, d)).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(d))
        return self._out.matmul(out.transpose(1, 2).reshape(b, t, w))


class VisionMLP(nn.Module):
    def __init__(self, width: int, mlp_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(width, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, width)
        self._fc1, self._fc2 = Packed(self.fc1), Packed(self.fc2)

    def forward(self, x):
        return tiled_rows(x, self._rows, self._fc1)

    def _rows(self, x):
        return self._fc2.matmul(self._fc1.matmul(x, gelu_tanh=True))


class VisionLayer(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.self_attn = VisionAttention(cfg.width, cfg.num_heads)
        self.layer_norm2 = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.mlp = VisionMLP(cfg.width, cfg.mlp_dim)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class VisionEncoder(nn.Module):
    def __init__(self, cfg: VisionConfig, out_width: int):
        super().__init__()
        self.cfg = cfg
        self.patch_embedding = nn.Conv2d(3, cfg.width, cfg.patch_size, stride=cfg.patch_size)
        self.position_embedding = nn.Embedding(cfg.tokens_per_image, cfg.width)
        self.layers = nn.ModuleList(VisionLayer(cfg) for _ in range(cfg.depth))
        self.post_layernorm = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.projector = nn.Linear(cfg.width, out_width)
        self._projector = Packed(self.projector)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [N, 3, S, S] in [-1, 1] -> tokens [N, tokens_per_image, out_width]."""
        x = self.patch_embedding(images).flatten(2).transpose(1, 2)
        x = x + self.position_embedding.weight
        for layer in self.layers:
            x = layer(x)
        return self._projector.matmul(self.post_layernorm(x))
