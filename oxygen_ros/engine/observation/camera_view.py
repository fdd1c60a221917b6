"""Per-camera view transforms: crop, rotate, flip, on an HxWx3 uint8 image. ROS-free numpy.

Why: a policy sees cameras the way its training data did. A robot's camera may be mounted
upside down or sideways, or a dataset may have been recorded rotated: openpi's LIBERO
example rotates both frames 180 degrees before the model. The transform runs on the
decoded image before the model's own resize, in this order:
  1. crop    (x, y, width, height) in the pixels of the image as published;
  2. rotate  0 | 90 | 180 | 270 degrees counter-clockwise (numpy.rot90);
  3. flip    none | horizontal (mirror left-right) | vertical (upside down) | both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROTATIONS = (0, 90, 180, 270)
FLIPS = ("none", "horizontal", "vertical", "both")


@dataclass(frozen=True)
class CameraView:
    rotate: int = 0
    flip: str = "none"
    crop: tuple[int, int, int, int] | None = None     # (x, y, width, height); None = whole image

    def __post_init__(self):
        if self.rotate not in ROTATIONS:
            raise ValueError(f"rotation {self.rotate} is not one of {list(ROTATIONS)} (degrees)")
        if self.flip not in FLIPS:
            raise ValueError(f"flip {self.flip!r} is not one of {list(FLIPS)}")
        if self.crop is not None:
            x, y, w, h = self.crop
            if x < 0 or y < 0 or w <= 0 or h <= 0:
                raise ValueError(f"crop box {list(self.crop)} needs x, y >= 0 and width, height > 0")

    @property
    def identity(self) -> bool:
        return self.rotate == 0 and self.flip == "none" and self.crop is None

    def problem(self, height: int, width: int) -> str:
        """Why this view cannot apply to a height x width image ("" if it can)."""
        if self.crop is None:
            return ""
        x, y, w, h = self.crop
        if x + w > width or y + h > height:
            return f"crop box x={x} y={y} {w}x{h} does not fit in the {width}x{height} image"
        return ""

    def apply(self, rgb: np.ndarray) -> np.ndarray:
        """The transformed image: `rgb` itself when there is nothing to do, else a contiguous copy."""
        if self.identity:
            return rgb
        out = rgb
        if self.crop is not None:
            x, y, w, h = self.crop
            out = out[y:y + h, x:x + w]
        if self.rotate:
            out = np.rot90(out, self.rotate // 90)
        if self.flip in ("horizontal", "both"):
            out = out[:, ::-1]
        if self.flip in ("vertical", "both"):
            out = out[::-1]
        return np.ascontiguousarray(out)     # torch.from_numpy refuses negative strides
