"""StarVLA's state as text (S1 and S5 in processor.py's docstring): the raw state normalised
as the robot type's training transform does, cut into 256 bins on [-1, 1] and written
between [STATE] and [ACTION] after the instruction."""
from __future__ import annotations

import numpy as np

from ...policy_io.errors import PolicyIOError
from .dataset_stats import STAT_FIELDS, stat_vector

STATE_BINS = 256
BIN_EDGES = np.linspace(-1.0, 1.0, STATE_BINS + 1)[:-1]       # S1: 256 left edges
STATE_MARKER = "[STATE]"
ACTION_MARKER = "[ACTION]"
STATE_MODES = ("q99", "min_max", "mean_std", "binary", "none")
BINARY_THRESHOLD = 0.5


def state_vector(state, when: str = "") -> np.ndarray:
    """A state as a finite float64 vector [S] ([1, S] accepted: S1 uses state[0])."""
    x = np.asarray(state)
    if x.ndim == 2 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 1 or x.size == 0 or x.dtype.kind not in "iuf":
        raise PolicyIOError(f"state must be a non-empty 1-D numeric vector (or [1, S]), got "
                            f"{getattr(x, 'dtype', '')} shape {x.shape}")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise PolicyIOError(f"state contains NaN or inf{' ' + when if when else ''}: {x.tolist()}")
    return x


def state_bins(normalized_state, clip: bool = False) -> np.ndarray:
    """A normalised state [S] -> int64 bins [S], StarVLA's np.digitize over 256 uniform bins
    on [-1, 1] (processor.py's docstring has the edges): below -1 is bin -1, as StarVLA
    writes it; clip=True clips to [-1, 1] first (below -1 is bin 0)."""
    x = state_vector(normalized_state, "after normalisation")
    if clip:
        x = np.clip(x, -1.0, 1.0)
    return (np.digitize(x, BIN_EDGES) - 1).astype(np.int64)


def bins_text(bins) -> str:
    return " ".join(str(int(b)) for b in bins)


def with_state(instruction: str, state_str: str) -> str:
    """S1's add_discretized_state_to_instruction for one example."""
    return f"{instruction} {STATE_MARKER} {state_str} {ACTION_MARKER}"


def normalize_state(x: np.ndarray, modes: tuple[str, ...], stats: dict | None, stats_file, unnorm_key: str) -> np.ndarray:
    """A raw state [S] float64 -> the training transform's normalised state [S] float64 (S5):
    `modes` one per dim (STATE_MODES), `stats` the key's state statistics (None when the
    file has none; `stats_file` and `unnorm_key` name them in errors)."""
    out = x.copy()
    where = f"{stats_file}: {unnorm_key!r}.state"
    for mode in set(modes):
        dims = np.array([i for i, m in enumerate(modes) if m == mode])
        if mode == "none":
            continue
        if mode == "binary":
            out[dims] = (x[dims] > BINARY_THRESHOLD).astype(np.float64)
            continue
        if stats is None:
            raise PolicyIOError(f"{stats_file}: key {unnorm_key!r} has no 'state' (or 'proprio') "
                                f"statistics, which state mode {mode!r} needs; pass state_modes='none' "
                                "for a state normalised already")
        a_key, b_key = STAT_FIELDS[mode]
        if a_key not in stats or b_key not in stats:
            raise PolicyIOError(f"{where} lacks {a_key}/{b_key} for state mode {mode!r} (has {sorted(stats)})")
        a = stat_vector(stats[a_key], f"{where}.{a_key}")
        b = stat_vector(stats[b_key], f"{where}.{b_key}", a.size)
        if a.size != x.size:
            raise PolicyIOError(f"state has {x.size} dims but {where}.{a_key} has {a.size}")
        a, b, v = a[dims], b[dims], x[dims]
        if mode == "q99":
            ok = a != b
            y = np.where(ok, 2.0 * (v - a) / np.where(ok, b - a, 1.0) - 1.0, v)
            out[dims] = np.clip(y, -1.0, 1.0)
        elif mode == "min_max":
            ok = a != b
            out[dims] = np.where(ok, 2.0 * (v - a) / np.where(ok, b - a, 1.0) - 1.0, 0.0)
        else:                                         # mean_std
            ok = b != 0
            out[dims] = np.where(ok, (v - a) / np.where(ok, b, 1.0), v)
    return out
