"""Strict checks of a state dict against the module it is for: the error every family's
checkpoint reader raises, with a message that names the differences."""
from __future__ import annotations

import torch


class WeightMismatchError(ValueError):
    """The converted weights do not fit the profile (names or shapes)."""


def check_state(expected: dict[str, torch.Size], got: dict[str, torch.Tensor], what: str) -> None:
    """Strict name and shape check with a message that names the differences."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    shapes = [f"{k}: expected {tuple(expected[k])}, got {tuple(got[k].shape)}"
              for k in sorted(set(expected) & set(got)) if tuple(got[k].shape) != tuple(expected[k])]
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} tensor(s): {short_list(missing)}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} tensor(s): {short_list(unexpected)}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es): {short_list(shapes)}")
    if problems:
        raise WeightMismatchError(f"{what}: " + "; ".join(problems))


def short_list(items: list[str], limit: int = 8) -> str:
    more = f" ... (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
