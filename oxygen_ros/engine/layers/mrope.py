"""Qwen3-VL's multimodal RoPE: three-axis positions for a prompt and interleaved tables.

Positions have three axes (t, h, w). Text tokens have all three equal, counting on;
an image's tokens sit on its merged grid (t = start, h = start + row, w = start + col)
and the text after it resumes at the image's maximum + 1. So a prompt's largest
position is below its length wherever it holds an image, and `rope_delta` =
max position + 1 - length is what a request carries from its prefill: the token at
cache index i (anything after the prompt) has position i + rope_delta on every axis.

Where all three axes are equal the interleaved rotation is the plain 1-D rotation, so
decode steps and appended text take [B, T] positions (index + rope_delta per row) and
the ordinary tables; only prompts with images need [3, B, T].

The head_dim/2 frequencies are shared out between the axes interleaved: frequency j
belongs to h if j % 3 == 1 and j < 3 * section[1], to w if j % 3 == 2 and
j < 3 * section[2], else to t.
"""
from __future__ import annotations

import torch


def frequency_axes(mrope_section: tuple[int, ...], head_dim: int) -> torch.Tensor:
    """Which axis (0 t, 1 h, 2 w) drives each of the head_dim rotary columns [head_dim]
    (column j and j + head_dim/2 share frequency j, "rotate half" layout)."""
    half = head_dim // 2
    if len(mrope_section) != 3 or sum(mrope_section) != half:
        raise ValueError(f"mrope_section {tuple(mrope_section)} must be three sizes summing to {half}")
    axes = [1 if j % 3 == 1 and j < 3 * mrope_section[1] else
            2 if j % 3 == 2 and j < 3 * mrope_section[2] else 0 for j in range(half)]
    return torch.tensor(axes + axes, dtype=torch.long)   # plain data: builds on the meta device too


def interleaved_tables(cos_table: torch.Tensor, sin_table: torch.Tensor, positions: torch.Tensor,
                       axes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position 1-D tables [max_positions, head_dim] + positions [3, B, T] -> cos, sin
    [B, T, head_dim], each column read at the position of the axis that owns it."""
    if positions.dim() != 3 or positions.shape[0] != 3:
        raise ValueError(f"three-axis positions must be [3, B, T], got {list(positions.shape)}")
    index = axes.view(1, 1, 1, -1).expand(1, *positions.shape[1:], axes.shape[0])
    cos = cos_table[positions].gather(0, index)[0]
    sin = sin_table[positions].gather(0, index)[0]
    return cos, sin


def rope_index(input_ids, image_grid_thw, image_token_id: int, vision_start_id: int | None = None,
               spatial_merge_size: int = 2) -> tuple[torch.Tensor, int]:
    """Three-axis positions of one prompt, as transformers' Qwen3VLModel.get_rope_index.

    input_ids: [T] (or [1, T]) token ids, each image a run of t*h*w / merge^2 image
    tokens; image_grid_thw: [N, 3] patch grids (t, h, w) in prompt order, or None;
    vision_start_id: if given, every image must follow that token. Still images only
    (t == 1; video frames are not supported). Returns (positions LongTensor [3, T] on
    input_ids' device, rope_delta = max position + 1 - T).
    """
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(f"rope_index takes one non-empty prompt [T], got {list(ids.shape)}")
    grids = [] if image_grid_thw is None else torch.as_tensor(image_grid_thw).reshape(-1, 3).tolist()
    tokens = ids.tolist()
    m = spatial_merge_size
    n_tokens = len(tokens)
    pieces: list[torch.Tensor] = []
    start = i = images = 0
    while i < n_tokens:
        if tokens[i] != image_token_id:
            j = i
            while j < n_tokens and tokens[j] != image_token_id:
                j += 1
            pieces.append(torch.arange(start, start + j - i).expand(3, -1))
            start += j - i
            i = j
            continue
        if images == len(grids):
            raise ValueError(f"the prompt has more images than the {len(grids)} grid(s) given")
        t, h, w = (int(v) for v in grids[images])
        if t != 1:
            raise ValueError(f"image {images}: temporal grid {t}; only still images (t == 1) are supported")
        if h % m or w % m:
            raise ValueError(f"image {images}: grid {h}x{w} is not a multiple of the merge size {m}")
        gh, gw = h // m, w // m
        if i + gh * gw > n_tokens or any(tok != image_token_id for tok in tokens[i:i + gh * gw]):
            raise ValueError(f"image {images}: needs {gh * gw} image tokens from index {i}")
        if vision_start_id is not None and (i == 0 or tokens[i - 1] != vision_start_id):
            raise ValueError(f"image {images} at index {i} does not follow the vision-start token")
        rows = torch.arange(gh).repeat_interleave(gw)
        cols = torch.arange(gw).repeat(gh)
        pieces.append(torch.stack([torch.zeros_like(rows), rows, cols]) + start)
        start += max(gh, gw)
        i += gh * gw
        images += 1
    if images != len(grids):
        raise ValueError(f"{len(grids)} grid(s) given for {images} image(s) in the prompt")
    positions = torch.cat(pieces, dim=1).to(ids.device)
    return positions, start - n_tokens


def text_positions(start, length: int, rope_delta) -> torch.Tensor:
    """[B, length] positions (all axes equal) of `length` text tokens written from cache
    index `start` (int or LongTensor [B]) by requests whose prefixes have `rope_delta`
    (int or LongTensor [B]); decode steps are length 1."""
    start = torch.as_tensor(start)
    rope_delta = torch.as_tensor(rope_delta, device=start.device)
    base = (start + rope_delta).reshape(-1, 1)
    return base + torch.arange(length, device=base.device)
