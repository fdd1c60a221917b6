"""StarVLA's policy I/O hooks for engine/factory.py (engine/registry.py describes them): a
run directory's StarVLAPolicyIO (processor.py) for the parameters' dataset key."""
from __future__ import annotations

from .processor import load_starvla_policy_io


def build_policy_io(convention: str, p: dict, model, tok, state):
    """robot_type names the run's dataset_statistics.json key (None: its only one)."""
    return load_starvla_policy_io(p["checkpoint"], p["robot_type"] or None, stats_path=p["norm_stats_path"] or None)


def fit_model(convention: str, p: dict, model) -> None:
    """Nothing: the PI_v3 head's chunk is the run's action horizon."""


def serve_policy_io(profile: str, checkpoint: str, model, tok):
    """None: `oxygen serve` passes its clients' observations to a StarVLA model as given."""
    return None
