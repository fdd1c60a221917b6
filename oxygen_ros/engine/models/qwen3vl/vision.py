"""Qwen3-VL's vision encoder: patch embedding, interpolated learned positions, 2-D rotary
attention within each image, the 2 x 2 patch merger and the DeepStack mergers.

Input is what the Qwen2-VL image processor (Qwen3-VL settings) writes, see
`policy_io.qwen3vl_images`: `pixel_values` [N_patches, C * T * P * P] with the patches of
each image in spatial-merge-block order (block row, block column, row in block, column in
block), and `grid_thw` [n_images, 3] = (t, h, w) in patches. The output has one row per
merged 2 x 2 block, in the same order, which is the order of the image's
`<|image_pad|>` tokens in the prompt.

Checkpoint names. The modules carry transformers' names, so the vision tensors of a
Qwen3-VL checkpoint load after stripping one prefix (`hf_vision_state_dict_to_ours`):

    model.visual.patch_embed.proj.{weight,bias}          Conv3d [D, C, T, P, P] (kept 5-D)
    model.visual.pos_embed.weight                        [num_position_embeddings, D]
    model.visual.blocks.{i}.norm1 / norm2.{weight,bias}  LayerNorm, eps 1e-6
    model.visual.blocks.{i}.attn.qkv.{weight,bias}       [3D, D], rows q | k | v
    model.visual.blocks.{i}.attn.proj.{weight,bias}
    model.visual.blocks.{i}.mlp.linear_fc1 / linear_fc2.{weight,bias}
    model.visual.merger.{norm,linear_fc1,linear_fc2}.*   norm over D, before the 2 x 2 shuffle
    model.visual.deepstack_merger_list.{j}.{norm,linear_fc1,linear_fc2}.*
                                                         norm over 4D, after the shuffle

A standalone transformers `Qwen3VLVisionModel` state dict has the same names without the
prefix. No buffer is saved (transformers' rotary inv_freq is not persistent either).

Numerics follow transformers (`Qwen3VLVisionModel`, release 5.x): the position table is
resampled bilinearly with align_corners=True to each image's (h, w) grid and summed in
float32; rotary angles are row * inv_freq and column * inv_freq (head_dim / 4 frequencies
each, theta 10000), concatenated and duplicated to the head dim, applied rotate-half in
float32; attention is full within each frame of each image; the MLP activation is the
config's (gelu_pytorch_tanh in the released checkpoints); the mergers use exact GELU.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...layers.blocks import Packed, apply_rope, tiled_rows
from .configuration import TANH_GELU, Qwen3VLVisionConfig

HF_VISUAL_PREFIX = "model.visual."

def hf_vision_state_dict_to_ours(sd: dict, prefix: str = HF_VISUAL_PREFIX) -> dict:
    """The vision tensors of a transformers Qwen3-VL state dict / checkpoint, named for
    `Qwen3VLVisionEncoder.load_state_dict` (the prefix stripped, other tensors dropped)."""
    out = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    if not out:
        raise ValueError(f"no tensor named {prefix}* in the state dict")
    return out


class Qwen3VLPatchEmbed(nn.Module):
    """transformers' Conv3d with kernel = stride = (T, P, P) sees exactly one patch per
    output, so it is a Linear over the flattened patch (C, T, P, P order); the weight stays
    5-D so that checkpoints load by name and shape."""

    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        kernel = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_channels, cfg.hidden_size, kernel_size=kernel, stride=kernel, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight
        return F.linear(x.to(w.dtype), w.reshape(w.shape[0], -1), self.proj.bias)


class Qwen3VLVisionAttention(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self._qkv, self._proj = Packed(self.qkv), Packed(self.proj)

    def forward(self, x: torch.Tensor, segments: list[int], cos: torch.Tensor, signed_sin: torch.Tensor):
        n = x.shape[0]
        q, k, v = self._qkv.matmul(x).view(n, 3, self.heads, self.head_dim).unbind(1)   # [N, H, d]
        # rotary in float32, as transformers does, then back to the activations' dtype
        q = apply_rope(q.float(), cos, signed_sin).to(x.dtype)
        k = apply_rope(k.float(), cos, signed_sin).to(x.dtype)
        scale = 1.0 / math.sqrt(self.head_dim)
        if len(set(segments)) == 1:   # equal-sized images (or one): a batch of independent sequences
            b, length = len(segments), segments[0]
            qb, kb, vb = (t.view(b, length, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
            out = F.scaled_dot_product_attention(qb, kb, vb, scale=scale).transpose(1, 2).reshape(n, -1)
        else:
            outs = []
            for qs, ks, vs in zip(q.split(segments), k.split(segments), v.split(segments)):
                o = F.scaled_dot_product_attention(qs.transpose(0, 1)[None], ks.transpose(0, 1)[None],
                                                   vs.transpose(0, 1)[None], scale=scale)
                outs.append(o[0].transpose(0, 1).reshape(qs.shape[0], -1))
            out = torch.cat(outs)
        return self._proj.matmul(out)


def _activation(name: str):
    """A vision config's hidden_act (one of configuration.VISION_ACTIVATIONS) as a function."""
    if name in TANH_GELU:
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu
    if name == "silu":
        return F.silu
    raise ValueError(f"Qwen3-VL vision config: unsupported hidden_act {name!r}")


class Qwen3VLVisionMLP(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.linear_fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.linear_fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self._fc1, self._fc2 = Packed(self.linear_fc1), Packed(self.linear_fc2)
        self.tanh_gelu = cfg.hidden_act in TANH_GELU
        self.act = _activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tiled_rows(x, self._rows, self._fc1)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        if self.tanh_gelu:
            return self._fc2.matmul(self._fc1.matmul(x, gelu_tanh=True))
        return self._fc2.matmul(self.act(self._fc1.matmul(x)))


class Qwen3VLVisionBlock(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.attn = Qwen3VLVisionAttention(cfg)
        self.mlp = Qwen3VLVisionMLP(cfg)

    def forward(self, x, segments, cos, signed_sin):
        x = x + self.attn(self.norm1(x), segments, cos, signed_sin)
        return x + self.mlp(self.norm2(x))


class Qwen3VLPatchMerger(nn.Module):
    """Each 2 x 2 block of neighbouring patches (consecutive rows in the processor's
    order) -> LayerNorm -> Linear -> GELU (exact) -> Linear to the text width. The main
    merger normalises each patch before the shuffle, the DeepStack mergers the
    concatenated block after it."""

    def __init__(self, cfg: Qwen3VLVisionConfig, postshuffle_norm: bool):
        super().__init__()
        self.width = cfg.hidden_size * cfg.spatial_merge_size ** 2
        self.postshuffle_norm = postshuffle_norm
        self.norm = nn.LayerNorm(self.width if postshuffle_norm else cfg.hidden_size, eps=cfg.norm_eps)
        self.linear_fc1 = nn.Linear(self.width, self.width)
        self.linear_fc2 = nn.Linear(self.width, cfg.out_hidden_size)
        self._fc1, self._fc2 = Packed(self.linear_fc1), Packed(self.linear_fc2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.postshuffle_norm:
            x = self.norm(x.reshape(-1, self.width))
        else:
            x = self.norm(x).reshape(-1, self.width)
        return self._fc2.matmul(F.gelu(self._fc1.matmul(x)))


def _merge_block_order(h: int, w: int, m: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of each patch of an h x w grid in the processor's order."""
    rows = torch.arange(h, device=device).view(h // m, m, 1, 1).expand(h // m, m, w // m, m)
    cols = torch.arange(w, device=device).view(1, 1, w // m, m).expand(h // m, m, w // m, m)
    return rows.permute(0, 2, 1, 3).reshape(-1), cols.permute(0, 2, 1, 3).reshape(-1)


def _bilinear_matrix(size: int, side: int, device) -> torch.Tensor:
    """[size, side] weights resampling a length-`side` axis to `size` points, bilinear with
    align_corners=True (source = i * (side - 1) / (size - 1)), in float32."""
    src = torch.arange(size, device=device, dtype=torch.float32) * (side - 1) / max(size - 1, 1)
    lo = src.floor()
    frac = src - lo
    lo = lo.long()
    hi = (lo + 1).clamp(max=side - 1)
    weights = torch.zeros(size, side, device=device, dtype=torch.float32)
    rows = torch.arange(size, device=device)
    weights[rows, lo] += 1 - frac
    weights[rows, hi] += frac
    return weights


class Qwen3VLVisionEncoder(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = Qwen3VLPatchEmbed(cfg)
        self.pos_embed = nn.Embedding(cfg.num_position_embeddings, cfg.hidden_size)
        self.blocks = nn.ModuleList(Qwen3VLVisionBlock(cfg) for _ in range(cfg.depth))
        self.merger = Qwen3VLPatchMerger(cfg, postshuffle_norm=False)
        self.deepstack_merger_list = nn.ModuleList(Qwen3VLPatchMerger(cfg, postshuffle_norm=True)
                                                   for _ in cfg.deepstack_visual_indexes)
        spatial = cfg.head_dim // 2      # half the head for rows, half for columns
        self._inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, spatial, 2, dtype=torch.float32) / spatial))

    def _grids(self, pixel_values: torch.Tensor, grid_thw) -> list[tuple[int, int, int]]:
        cfg = self.cfg
        if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 2 \
                or pixel_values.shape[1] != cfg.patch_dim or not pixel_values.is_floating_point():
            raise ValueError(f"pixel_values must be a float tensor [N_patches, {cfg.patch_dim}] "
                             f"(C*T*P*P = {cfg.in_channels}*{cfg.temporal_patch_size}*{cfg.patch_size}^2), got "
                             f"{getattr(pixel_values, 'dtype', type(pixel_values).__name__)} "
                             f"{tuple(getattr(pixel_values, 'shape', ()))}")
        grid = torch.as_tensor(grid_thw)
        if grid.ndim != 2 or grid.shape[1] != 3 or grid.shape[0] == 0 or grid.is_floating_point() \
                or grid.dtype == torch.bool:
            raise ValueError(f"grid_thw must be an integer tensor [n_images, 3], got {grid.dtype} {tuple(grid.shape)}")
        grids = [tuple(int(v) for v in row) for row in grid.tolist()]
        m = cfg.spatial_merge_size
        for t, h, w in grids:
            if t < 1 or h < 1 or w < 1 or h % m or w % m:
                raise ValueError(f"grid_thw row {(t, h, w)}: t, h, w must be positive and h, w multiples "
                                 f"of spatial_merge_size {m}")
        total = sum(t * h * w for t, h, w in grids)
        if total != pixel_values.shape[0]:
            raise ValueError(f"grid_thw describes {total} patches but pixel_values has {pixel_values.shape[0]}")
        return grids

    def position_embeddings(self, grids: list[tuple[int, int, int]]) -> torch.Tensor:
        """[N_patches, D] float32: the learned square grid resampled to each image's grid."""
        side, m = self.cfg.position_grid_side, self.cfg.spatial_merge_size
        table = self.pos_embed.weight.float().view(side, side, -1)
        device = table.device
        out = []
        for t, h, w in grids:
            per_row = torch.einsum("hi,ijd->hjd", _bilinear_matrix(h, side, device), table)
            grid = torch.einsum("wj,hjd->hwd", _bilinear_matrix(w, side, device), per_row)
            grid = grid.view(h // m, m, w // m, m, -1).permute(0, 2, 1, 3, 4).reshape(h * w, -1)
            out.append(grid.repeat(t, 1) if t > 1 else grid)
        return torch.cat(out)

    def rotary_tables(self, grids: list[tuple[int, int, int]], device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, signed sin [N_patches, 1, head_dim] float32 for `layers.apply_rope`."""
        m = self.cfg.spatial_merge_size
        inv = self._inv_freq.to(device)
        rows, cols = [], []
        for t, h, w in grids:
            r, c = _merge_block_order(h, w, m, device)
            rows.append(r.repeat(t))
            cols.append(c.repeat(t))
        angles = torch.cat([torch.cat(rows)[:, None].float() * inv, torch.cat(cols)[:, None].float() * inv], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        return torch.cat([cos, cos], -1)[:, None], torch.cat([-sin, sin], -1)[:, None]

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """pixel_values [N, C*T*P*P], grid_thw [n, 3] -> (image embeddings [N / m^2, out_hidden],
        DeepStack features: one [N / m^2, out_hidden] per deepstack index, in layer order as
        transformers lists them; entry k is added after text decoder layer k)."""
        grids = self._grids(pixel_values, grid_thw)
        x = self.patch_embed(pixel_values)
        x = x + self.position_embeddings(grids).to(x.dtype)
        cos, signed_sin = self.rotary_tables(grids, x.device)
        segments = [h * w for t, h, w in grids for _ in range(t)]   # attention within each frame
        deepstack = []
        for i, block in enumerate(self.blocks):
            x = block(x, segments, cos, signed_sin)
            if i in self.cfg.deepstack_visual_indexes:   # merger j belongs to the j-th listed index
                deepstack.append(self.deepstack_merger_list[self.cfg.deepstack_visual_indexes.index(i)](x))
        return self.merger(x), deepstack
