"""Where a StarVLA run keeps its files and how they are read: the run directory of a weights
file (<run_dir>/checkpoints/<name>.pt), config.yaml / config.json, dataset_statistics.json and
preprocessor_config.json (share_tools.py read_mode_config's layout). Shared by the policy I/O
(processor.py) and the weights reader (checkpoint.py)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ...policy_io.checkpoint import read_json as read_if_present
from ...policy_io.errors import PolicyIOError

STATS_FILE = "dataset_statistics.json"
CONFIG_FILES = ("config.yaml", "config.json")                    # from_pretrained reads the yaml
PREPROCESSOR_FILE = "preprocessor_config.json"
CHECKPOINT_SUBDIR = "checkpoints"


def run_dirs(path: str | os.PathLike) -> tuple[Path | None, list[Path]]:
    """(the weights file if `path` names one, directories to look in, in order).

    StarVLA writes <run_dir>/checkpoints/steps_N_pytorch_model.pt with config.yaml,
    config.json and dataset_statistics.json in <run_dir> (the .pt's parents[1]);
    final_model/pytorch_model.pt sits one level down too. The .pt's own directory is
    tried after that, and a directory given directly is tried first."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_file():
        dirs = [p.parents[1], p.parent] if len(p.parents) > 1 else [p.parent]
        return p, dirs
    if p.is_dir():
        dirs = [p]
        if p.name == CHECKPOINT_SUBDIR or not any((p / n).is_file() for n in (STATS_FILE, *CONFIG_FILES)):
            dirs.append(p.parent)
        return None, dirs
    raise PolicyIOError(f"StarVLA checkpoint {p} does not exist (give the run directory, its "
                        f"{CHECKPOINT_SUBDIR}/ directory or a .pt file in it)")


def find_run_file(dirs: Sequence[Path], names: Sequence[str]) -> Path | None:
    for d in dirs:
        for name in names:
            if (d / name).is_file():
                return d / name
    return None


def read_json(path: Path) -> dict:
    """The JSON object in `path` (which must exist)."""
    if not path.is_file():
        raise PolicyIOError(f"cannot read {path}: no such file")
    return read_if_present(path)


def read_run_config(path: Path) -> dict:
    """config.yaml (yaml.safe_load; OmegaConf interpolations stay unresolved strings) or
    config.json (the trainer writes it from the same yaml)."""
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:          # pragma: no cover - pyyaml is installed with ROS
            raise PolicyIOError(f"reading {path} needs PyYAML ({exc}); config.json works without it") from exc
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise PolicyIOError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise PolicyIOError(f"{path} does not hold a mapping")
        return data
    return read_json(path)
