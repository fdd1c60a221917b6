"""A small convolutional image encoder with its projector into the backbone's embeddings.

Trained here from scratch (no pretrained weights of a fitting kind ship in any registry
package): a CNN learns where a 2 cm cube is from ~30k frames far more readily than a ViT.
Coordinate channels let it place things in the image; the final map's cells become the
camera's tokens, each with a learned position embedding, then LayerNorm and the projector.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .configuration import ConvVisionConfig


class ConvBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int, kernel: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2)
        self.norm = nn.GroupNorm(min(groups, cout), cout)

    def forward(self, x):
        return F.gelu(self.norm(self.conv(x)))


def coordinate_channels(n: int, size: int, dtype, device) -> torch.Tensor:
    """[n, 2, size, size]: x and y in [-1, 1]."""
    r = torch.linspace(-1.0, 1.0, size, dtype=dtype, device=device)
    yy, xx = torch.meshgrid(r, r, indexing="ij")
    return torch.stack([xx, yy])[None].expand(n, 2, size, size)


class ConvVisionEncoder(nn.Module):
    def __init__(self, cfg: ConvVisionConfig, out_width: int):
        super().__init__()
        self.cfg = cfg
        stride = 1
        for s in cfg.strides:
            stride *= s
        if cfg.image_size // stride != cfg.grid:
            raise ValueError(f"strides {cfg.strides} take {cfg.image_size} px to {cfg.image_size // stride}, "
                             f"not the grid {cfg.grid}")
        blocks, cin = [], 5                     # RGB + two coordinate channels
        for i, (cout, s) in enumerate(zip(cfg.channels, cfg.strides)):
            blocks.append(ConvBlock(cin, cout, s, cfg.groups, kernel=5 if i == 0 else 3))
            cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.position_embedding = nn.Embedding(cfg.tokens_per_image, cfg.width)
        self.post_layernorm = nn.LayerNorm(cfg.width, eps=1e-6)
        self.projector = nn.Linear(cfg.width, out_width)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """images [N, 3, S, S] in [-1, 1] -> per-cell features [N, grid**2, width] (before the
        projector: what the training's auxiliary heads read)."""
        n, _, s, _ = images.shape
        x = torch.cat([images, coordinate_channels(n, s, images.dtype, images.device)], dim=1)
        for block in self.blocks:
            x = block(x)
        x = x.flatten(2).transpose(1, 2) + self.position_embedding.weight
        return self.post_layernorm(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [N, 3, S, S] in [-1, 1] -> tokens [N, grid**2, out_width]."""
        return self.projector(self.features(images))
