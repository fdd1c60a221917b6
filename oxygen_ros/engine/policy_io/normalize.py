"""The normalisation formulas, each written as its convention writes it (no clipping in either).

openpi   quantile  (x - q01) / (q99 - q01 + 1e-6) * 2 - 1     inverse (y + 1) / 2 * (q99 - q01 + 1e-6) + q01
         mean_std  (x - mean) / (std + 1e-6)                  inverse y * (std + 1e-6) + mean
         Arithmetic follows numpy promotion with float64 statistics, as in openpi.
LeRobot  quantile  2 * (x - q01) / d - 1, d = q99 - q01 with eps only where d == 0
                                                              inverse (y + 1) * d / 2 + q01
         mean_std  (x - mean) / (std + eps)                   inverse y * std + mean
         Arithmetic in the input's float dtype (float32 for anything else): LeRobot's normalizer
         moves its float32 statistics to the dtype of the tensor it is given.
"""
from __future__ import annotations

import numpy as np

OPENPI_EPS = 1e-6


def _lerobot_dtype(x: np.ndarray, stats: dict[str, np.ndarray], eps: float):
    dtype = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    return x.astype(dtype, copy=False), {k: v.astype(dtype) for k, v in stats.items()}, dtype.type(eps)


def normalize(x: np.ndarray, stats: dict[str, np.ndarray], mode: str, convention: str,
              eps: float) -> np.ndarray:
    """Raw -> model space for a 1-D vector; statistics longer than x are cut to its length."""
    if mode == "none":
        return x
    s = {k: v[: x.shape[-1]] for k, v in stats.items()}
    if convention == "openpi":
        if mode == "quantile":
            return (x - s["q01"]) / (s["q99"] - s["q01"] + OPENPI_EPS) * 2.0 - 1.0
        return (x - s["mean"]) / (s["std"] + OPENPI_EPS)
    x, s, eps = _lerobot_dtype(x, s, eps)
    if mode == "quantile":
        denom = s["q99"] - s["q01"]
        return 2.0 * (x - s["q01"]) / np.where(denom == 0, eps, denom) - 1.0
    return (x - s["mean"]) / (s["std"] + eps)


def unnormalize(y: np.ndarray, stats: dict[str, np.ndarray], mode: str, convention: str,
                eps: float) -> np.ndarray:
    """Model space -> raw for an [H, D] chunk.

    openpi: only the statistics' dims are unnormalized when D is wider (quantile: the rest
    pass through; mean_std: openpi pads mean 0 / std 1, so the rest get * (1 + 1e-6)).
    LeRobot: D must already equal the statistics' width (it cuts to action dims first).
    """
    if mode == "none":
        return y
    if convention == "openpi":
        if mode == "quantile":
            q01, q99 = stats["q01"], stats["q99"]
            dims = q01.shape[-1]
            head = (y[..., :dims] + 1.0) / 2.0 * (q99 - q01 + OPENPI_EPS) + q01
            return np.concatenate([head, y[..., dims:]], axis=-1)
        pad = y.shape[-1] - stats["mean"].shape[-1]
        mean = np.pad(stats["mean"], (0, pad), constant_values=0.0)
        std = np.pad(stats["std"], (0, pad), constant_values=1.0)
        return y * (std + OPENPI_EPS) + mean
    y, s, eps = _lerobot_dtype(y, stats, eps)
    if mode == "quantile":
        denom = s["q99"] - s["q01"]
        return (y + 1.0) * np.where(denom == 0, eps, denom) / 2.0 + s["q01"]
    return y * s["std"] + s["mean"]
