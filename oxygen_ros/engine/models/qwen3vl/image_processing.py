"""Camera frames -> Qwen3-VL vision input (`pixel_values`, `grid_thw`), as transformers'
Qwen2-VL image processor does it with Qwen3-VL's settings.

Per image (H x W x 3 uint8 RGB):
1. smart resize: height and width become multiples of patch * merge (32), rounded to the
   nearest multiple, then scaled (aspect kept) into [min_pixels, max_pixels];
2. resize with bicubic, one of two conventions (`resize_mode`):
   "pil"   the slow processor (`Qwen2VLImageProcessorPil`; `Qwen2VLImageProcessor` in
           4.x): PIL bicubic on the uint8 image (PIL filters over the source when
           downscaling, rounds to uint8 between the two passes), then
           float32(x * (1/255) in float64), then (x - mean) / std in float32;
   "torch" the fast processor (`Qwen2VLImageProcessor` in 5.x, `...Fast` in 4.x):
           torchvision's resize of the uint8 tensor = `F.interpolate(mode="bicubic",
           align_corners=False, antialias=True)`, skipped when the size is unchanged. On
           CPU torch resizes uint8 natively (within 1 of PIL); on other devices torchvision
           resizes in float32, then clamps to [0, 255], rounds and casts to uint8 (up to
           ~20 levels from PIL on noisy images). Then (x - 255 mean) / (255 std) in
           float32 (rescale fused into the normalisation);
3. the still image is repeated over the temporal patch (2 frames), and cut into P x P
   patches, written in spatial-merge-block order: for each 2 x 2 block of patches (block
   rows, then block columns), its four patches row by row; each patch flattened as
   (channel, time, row, column).

`grid_thw` is (1, H / P, W / P) per image; an image gives t * h * w / merge^2 prompt tokens
(`image_token_count`). The defaults are Qwen3-VL's published preprocessor settings
(patch 16, merge 2, temporal 2, mean = std = 0.5, 65536 <= pixels <= 16384 * 32 * 32).
Which resize a checkpoint was deployed with is a profile choice; the default is "pil".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ...policy_io.errors import PolicyIOError

RESIZE_MODES = ("pil", "torch")
RESCALE_FACTOR = 1 / 255


@dataclass(frozen=True)
class Qwen3VLImageSettings:
    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 65536
    max_pixels: int = 16384 * 32 * 32
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    resize_mode: str = "pil"

    def __post_init__(self):
        object.__setattr__(self, "image_mean", tuple(float(v) for v in self.image_mean))
        object.__setattr__(self, "image_std", tuple(float(v) for v in self.image_std))
        for name in ("patch_size", "temporal_patch_size", "merge_size", "min_pixels", "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PolicyIOError(f"Qwen3-VL image settings: {name} must be a positive int, got {value!r}")
        if self.min_pixels > self.max_pixels:
            raise PolicyIOError(f"Qwen3-VL image settings: min_pixels {self.min_pixels} > max_pixels {self.max_pixels}")
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or any(s == 0 for s in self.image_std):
            raise PolicyIOError("Qwen3-VL image settings: image_mean and image_std need 3 values, std non-zero; "
                                f"got {self.image_mean}, {self.image_std}")
        if self.resize_mode not in RESIZE_MODES:
            raise PolicyIOError(f"Qwen3-VL image settings: resize_mode must be one of {RESIZE_MODES}, "
                                f"got {self.resize_mode!r}")

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    @classmethod
    def from_hf_dict(cls, d: dict, resize_mode: str = "pil") -> "Qwen3VLImageSettings":
        """From a checkpoint's preprocessor_config.json. The resize convention is not in
        that file (transformers picks it by what is installed), so it is an argument."""
        size = d.get("size") or {}
        resample = d.get("resample", 3)
        if resample != 3:
            raise PolicyIOError(f"preprocessor_config.json: resample {resample!r} is not bicubic (3)")
        for key, expected in (("do_resize", True), ("do_rescale", True), ("do_normalize", True)):
            if d.get(key, expected) != expected:
                raise PolicyIOError(f"preprocessor_config.json: {key}={d[key]!r} is not supported")
        if abs(float(d.get("rescale_factor", RESCALE_FACTOR)) - RESCALE_FACTOR) > 1e-12:
            raise PolicyIOError(f"preprocessor_config.json: rescale_factor {d['rescale_factor']} is not 1/255")
        defaults = cls()
        return cls(patch_size=d.get("patch_size", defaults.patch_size),
                   temporal_patch_size=d.get("temporal_patch_size", defaults.temporal_patch_size),
                   merge_size=d.get("merge_size", defaults.merge_size),
                   min_pixels=size.get("shortest_edge", d.get("min_pixels", defaults.min_pixels)),
                   max_pixels=size.get("longest_edge", d.get("max_pixels", defaults.max_pixels)),
                   image_mean=tuple(d.get("image_mean", defaults.image_mean)),
                   image_std=tuple(d.get("image_std", defaults.image_std)),
                   resize_mode=resize_mode)


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width): multiples of `factor`, pixel count within [min_pixels, max_pixels],
    aspect ratio kept as closely as the rounding allows (Qwen2-VL's rule)."""
    if height < 1 or width < 1:
        raise PolicyIOError(f"an image must be at least 1x1, got {height}x{width}")
    if max(height, width) / min(height, width) > 200:
        raise PolicyIOError(f"a {height}x{width} image is too elongated for Qwen3-VL "
                            "(aspect ratio must be at most 200)")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _check_frame(image, index: int) -> None:
    if not isinstance(image, np.ndarray):
        raise PolicyIOError(f"image {index}: expected an HxWx3 uint8 numpy array, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise PolicyIOError(f"image {index}: expected dtype uint8 (0..255 RGB), got {image.dtype}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise PolicyIOError(f"image {index}: expected shape HxWx3 (RGB, channels last), got {image.shape}")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise PolicyIOError(f"image {index}: empty image {image.shape}")


def _pil_pixels(image: np.ndarray, size: tuple[int, int], s: Qwen3VLImageSettings) -> torch.Tensor:
    """[3, H', W'] float32 as the slow processor computes it."""
    height, width = size
    resized = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((width, height), resample=Image.BICUBIC))
    x = (resized.astype(np.float64) * RESCALE_FACTOR).astype(np.float32)
    mean, std = np.asarray(s.image_mean, np.float32), np.asarray(s.image_std, np.float32)
    x = (x - mean) / std
    return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))


def torch_bicubic_resize(x: torch.Tensor, size: tuple[int, int], native_uint8: bool | None = None) -> torch.Tensor:
    """torchvision's `resize(uint8 [B, C, H, W], size, BICUBIC, antialias=True)`.
    `native_uint8` None decides as torchvision does: the uint8 kernel on CPU, else float32."""
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    if native_uint8 if native_uint8 is not None else x.device.type == "cpu":
        return F.interpolate(x, size=list(size), mode="bicubic", align_corners=False, antialias=True)
    y = F.interpolate(x.float(), size=list(size), mode="bicubic", align_corners=False, antialias=True)
    return y.clamp_(0, 255).round_().to(torch.uint8)


def _torch_pixels(image: np.ndarray, size: tuple[int, int], s: Qwen3VLImageSettings, device) -> torch.Tensor:
    """[3, H', W'] float32 as the fast processor computes it."""
    x = torch.from_numpy(np.ascontiguousarray(image)).to(device).permute(2, 0, 1).contiguous()[None]
    x = torch_bicubic_resize(x, size)[0]
    mean = torch.tensor(s.image_mean, dtype=torch.float32, device=x.device) * (1.0 / RESCALE_FACTOR)
    std = torch.tensor(s.image_std, dtype=torch.float32, device=x.device) * (1.0 / RESCALE_FACTOR)
    return (x.to(torch.float32) - mean[:, None, None]) / std[:, None, None]


def patchify(pixels: torch.Tensor, s: Qwen3VLImageSettings) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """[C, H, W] -> ([h * w, C * T * P * P] in spatial-merge-block order, (1, h, w))."""
    c, height, width = pixels.shape
    p, m, t = s.patch_size, s.merge_size, s.temporal_patch_size
    gh, gw = height // p, width // p
    x = pixels.reshape(c, gh // m, m, p, gw // m, m, p).permute(1, 4, 2, 5, 0, 3, 6)  # bh bw mh mw C P P
    x = x.unsqueeze(5).expand(*x.shape[:5], t, p, p)                                  # a still image over T
    return x.reshape(gh * gw, c * t * p * p), (1, gh, gw)


def qwen3vl_pixels(images, settings: Qwen3VLImageSettings | None = None,
                   device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One HxWx3 uint8 RGB frame or a sequence of them (sizes may differ) ->
    (pixel_values float32 [sum of h * w, C * T * P * P], grid_thw int64 [n_images, 3]),
    the images' patches one after the other. `device` is where the "torch" resize runs
    (CPU by default) and where the result is; "pil" computes on the CPU."""
    s = settings or Qwen3VLImageSettings()
    if isinstance(images, np.ndarray):
        frames = [images]
    elif isinstance(images, Sequence) and not isinstance(images, (str, bytes)):
        frames = list(images)
    else:
        frames = None
    if not frames:
        raise PolicyIOError(f"expected an HxWx3 uint8 image or a non-empty list of them, got {type(images).__name__}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    patches, grids = [], []
    for i, image in enumerate(frames):
        _check_frame(image, i)
        size = smart_resize(image.shape[0], image.shape[1], s.factor, s.min_pixels, s.max_pixels)
        pixels = _pil_pixels(image, size, s) if s.resize_mode == "pil" else _torch_pixels(image, size, s, device)
        flat, grid = patchify(pixels.to(device), s)
        patches.append(flat)
        grids.append(grid)
    return torch.cat(patches), torch.tensor(grids, dtype=torch.long, device=device)


def image_token_count(grid_thw, merge_size: int = 2) -> list[int]:
    """Prompt tokens (`<|image_pad|>` count) per image: t * h * w / merge_size^2."""
    grid = torch.as_tensor(grid_thw)
    if grid.ndim == 1:
        grid = grid[None]
    if grid.ndim != 2 or grid.shape[1] != 3 or grid.is_floating_point():
        raise PolicyIOError(f"grid_thw must be integers [n_images, 3], got {grid.dtype} {tuple(grid.shape)}")
    counts = []
    for t, h, w in grid.tolist():
        if t < 1 or h % merge_size or w % merge_size or h < 1 or w < 1:
            raise PolicyIOError(f"grid_thw row {(t, h, w)} is not a valid grid for merge size {merge_size}")
        counts.append(t * h * w // merge_size ** 2)
    return counts
