"""Camera images -> pi0.5 pixels: resize-with-pad to S x S as each convention does it, then [-1, 1].

openpi:  PIL bilinear on the uint8 image (PIL filters over the source when downscaling and
         re-quantizes to uint8), pasted on a black canvas, then x / 255 * 2 - 1.
LeRobot: x / 255 as float32, F.interpolate bilinear (align_corners=False, no antialias),
         clamp to [0, 1], zero padding, then * 2 - 1.
Both centre the image (the odd pixel of padding goes bottom/right), so padding ends up -1,
and both leave an image that is already S x S unresized.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ...policy_io.errors import PolicyIOError

SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")   # pi0.5's camera order


def _fitted_size(height: int, width: int, size: int) -> tuple[int, int]:
    ratio = max(width / size, height / size)
    fitted = int(height / ratio), int(width / ratio)
    if min(fitted) < 1:
        raise PolicyIOError(f"a {height}x{width} image is too thin to resize to {size}x{size}")
    return fitted


def openpi_pixels(image: np.ndarray, size: int) -> torch.Tensor:
    height, width = image.shape[:2]
    if (height, width) != (size, size):
        fitted_h, fitted_w = _fitted_size(height, width, size)
        resized = Image.fromarray(image).resize((fitted_w, fitted_h), resample=Image.BILINEAR)
        canvas = Image.new(resized.mode, (size, size), 0)
        canvas.paste(resized, (int((size - fitted_w) / 2), int((size - fitted_h) / 2)))
        image = np.array(canvas)
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).to(torch.float32)
    return x / 255.0 * 2.0 - 1.0


def lerobot_pixels(image: np.ndarray, size: int) -> torch.Tensor:
    x = torch.from_numpy(np.ascontiguousarray(image)).to(torch.float32).permute(2, 0, 1) / 255
    height, width = image.shape[:2]
    if (height, width) != (size, size):
        fitted_h, fitted_w = _fitted_size(height, width, size)
        x = F.interpolate(x[None], size=(fitted_h, fitted_w), mode="bilinear",
                          align_corners=False)[0].clamp(0.0, 1.0)
        top, extra_h = divmod(size - fitted_h, 2)
        left, extra_w = divmod(size - fitted_w, 2)
        x = F.pad(x, (left, left + extra_w, top, top + extra_h), value=0.0)
    return x * 2.0 - 1.0


def camera_pixels(images: dict, convention: str, size: int) -> tuple[torch.Tensor, list[bool]]:
    """[N, 3, S, S] float32 for the present cameras in slot order, and one bool per slot."""
    unknown = sorted(set(images) - set(SLOTS))
    if unknown:
        raise PolicyIOError(f"unknown camera slot(s) {unknown}; pi0.5's slots are {list(SLOTS)}")
    to_pixels = openpi_pixels if convention == "openpi" else lerobot_pixels
    pixels, mask = [], []
    for slot in SLOTS:
        image = images.get(slot)
        mask.append(image is not None)
        if image is None:
            continue
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 \
                or image.shape[2] != 3 or image.size == 0:
            raise PolicyIOError(f"camera {slot!r} must be a non-empty HxWx3 uint8 RGB array, got "
                                f"{type(image).__name__} {getattr(image, 'dtype', '')} "
                                f"{getattr(image, 'shape', '')}")
        pixels.append(to_pixels(image, size))
    if not pixels:
        raise PolicyIOError(f"no camera image given; pi0.5 needs at least one of {list(SLOTS)}")
    return torch.stack(pixels), mask
