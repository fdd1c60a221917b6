"""An episode's shard on disk, in scripts/record_demos.py's format (documented there): its
frames' arrays and its metadata in one compressed .npz, written whole (a temporary name,
then renamed) so that a stopped recorder leaves no half-written shard. The scripted
expert's demonstrations and the policy's own episodes (scripts/panda_policy_rollout.py
--record, source "policy") are written alike; ROS-free."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import cube_place, panda_scene as ps

FORMAT_VERSION = 1


def shard_path(out: Path, seed: int) -> Path:
    return Path(out) / f"episode_{seed}.npz"


def write_shard(out: Path, seed: int, arrays: dict, *, success: bool, action_rate_hz: float, image_size: int,
                phase_names, source: str = "expert", perturb_rad: float = 0.0, perturb_phases=(),
                start_offset_m: float = 0.0, **extra) -> Path:
    """Write episode `seed`'s `arrays` (the per-frame keys) with the format's metadata into
    folder `out`; `extra`: further metadata (e.g. the checkpoint a policy ran)."""
    meta = {"seed": np.int64(seed), "success": np.bool_(success), "action_rate_hz": np.float64(action_rate_hz),
            "image_size": np.int64(image_size), "perturb_rad": np.float64(perturb_rad),
            "start_offset_m": np.float64(start_offset_m), "perturb_phases": np.array(perturb_phases, dtype=str),
            "phase_names": np.array(phase_names), "place_names": np.array(cube_place.PLACES),
            "joint_names": np.array(ps.JOINT_NAMES), "format_version": np.int64(FORMAT_VERSION),
            "source": np.array(source), **{k: np.array(v) for k, v in extra.items()}}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".episode_{seed}.tmp.npz"
    np.savez_compressed(tmp, **arrays, **meta)
    return tmp.replace(shard_path(out, seed))
