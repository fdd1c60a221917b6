"""The robot <-> model boundary that every family shares: the error, the normalization
formulas (openpi's and LeRobot's), their statistics files, joint limits as a safety envelope
(LimitsIO, for models without statistics) and further experts' action statistics.

Each family's own policy I/O (what its checkpoint's training pipeline did to observations
and actions) is its `processor.py`: pi0.5's openpi / LeRobot transforms in
models/pi05/processor.py, XR-0's deploy path in models/xr0, StarVLA's in models/starvla.
"""
from __future__ import annotations

from .errors import PolicyIOError
from .limits import LimitsIO

__all__ = ["LimitsIO", "PolicyIOError"]
