"""The Qwen3-VL family's checkpoint error, in a module of its own so that both the safetensors
reading (safetensors_files.py) and the mapping onto our modules (checkpoint.py) raise it; the
families built on Qwen3-VL (xr0, starvla) derive or raise it too."""
from __future__ import annotations

from ...state_checks import WeightMismatchError


class Qwen3VLCheckpointError(WeightMismatchError):
    """A Qwen3-VL / XR-0 checkpoint that our model cannot take (names, shapes, config)."""
