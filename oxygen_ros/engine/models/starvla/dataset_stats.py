"""A StarVLA run's dataset_statistics.json, one entry per embodiment key: the action statistics
the unnormalisation reads (ActionStats: q01/q99 or min/max and the gripper mask) and the state
statistics the state normalisation reads (the file format: processor.py's docstring, S4)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...policy_io.errors import PolicyIOError

EXPECTED_STATS = ('{"<key>": {"action": {"q01": [D], "q99": [D], "mask": [D bools], ...}, '
                  '"state": {"q01": [S], "q99": [S], "min", "max", "mean", "std"}}}')
STAT_FIELDS = {"q99": ("q01", "q99"), "min_max": ("min", "max"), "mean_std": ("mean", "std")}


def action_keys(stats: dict) -> list[str]:
    """The keys of the file that hold "action" statistics, in file order."""
    return [k for k, v in stats.items() if isinstance(v, dict) and "action" in v]


def stat_vector(values, where: str, n: int | None = None) -> np.ndarray:
    """One statistics array: finite float64 [n] (any non-empty length when n is None)."""
    if values is None:
        raise PolicyIOError(f"{where} is null in the statistics file")
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PolicyIOError(f"{where}: not a numeric array ({exc})") from exc
    if x.ndim != 1 or x.size == 0 or (n is not None and x.size != n):
        raise PolicyIOError(f"{where}: expected {n if n is not None else 'a non-empty list of'} "
                            f"numbers, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise PolicyIOError(f"{where}: contains NaN or inf")
    return x


@dataclass(frozen=True)
class ActionStats:
    """One key's action statistics, as the unnormalisation reads them."""
    low: np.ndarray           # [D] q01 (or min)
    high: np.ndarray          # [D] q99 (or max)
    mask: np.ndarray          # [D] bool: True = unnormalise, False = gripper (binarised)

    @property
    def dim(self) -> int:
        return self.low.shape[0]


def parse_action_stats(entry, where: str, norm: str) -> ActionStats:
    """A key's "action" statistics for action_norm `norm` (STAT_FIELDS); no mask: all True."""
    action = entry.get("action") if isinstance(entry, dict) else None
    if not isinstance(action, dict):
        raise PolicyIOError(f"{where} has no 'action' statistics; expected {EXPECTED_STATS}")
    lo_key, hi_key = STAT_FIELDS[norm]
    missing = [k for k in (lo_key, hi_key) if k not in action]
    if missing:
        raise PolicyIOError(f"{where}.action lacks {missing} (has {sorted(action)}); action_norm={norm!r} "
                            f"needs {lo_key}/{hi_key}")
    low = stat_vector(action[lo_key], f"{where}.action.{lo_key}")
    high = stat_vector(action[hi_key], f"{where}.action.{hi_key}", low.size)
    if "mask" in action and action["mask"] is not None:
        raw = np.asarray(action["mask"])
        if raw.ndim != 1 or raw.size != low.size or raw.dtype.kind not in "biu":
            raise PolicyIOError(f"{where}.action.mask must be {low.size} booleans, got "
                                f"{raw.dtype} shape {raw.shape}")
        mask = raw.astype(bool)
    else:
        mask = np.ones(low.size, dtype=bool)     # model2simpler_interface.py: np.ones_like(q01, dtype=bool)
    return ActionStats(low, high, mask)


def entry_state_stats(entry) -> dict | None:
    """A key's "state" statistics (older files: "proprio"), None when it has none."""
    if not isinstance(entry, dict):
        return None
    state = entry.get("state", entry.get("proprio"))
    return state if isinstance(state, dict) else None
