"""The record of an action head's Euler loop, for parity debugging: what
`sample_actions(..., return_intermediates=True)` returns beside the chunk."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, eq=False)
class FlowStep:
    """One Euler step k: the flow time t it evaluates, the state x it starts from (step 0's
    is the noise), the velocity v the network gives at (x, t), and dt. The next state is
    x + dt * v; the last step's is the returned chunk. The tensors are the loop's own
    (not copies; no == on them); a head that conditions on a bucket of t says so."""
    t: float
    x: torch.Tensor
    v: torch.Tensor
    dt: float
