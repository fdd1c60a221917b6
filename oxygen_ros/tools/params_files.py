"""The node's params files: where config/ is (a source checkout or a ROS install) and
what a file sets."""
from __future__ import annotations

from pathlib import Path


def checkout_root() -> Path | None:
    """The repository root when running from a source checkout, else None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "config").is_dir() and (root / "package.xml").is_file() else None


def config_file(name: str) -> Path:
    """config/<name> of the checkout, else of the installed package's share folder."""
    root = checkout_root()
    if root is not None and (root / "config" / name).is_file():
        return root / "config" / name
    try:
        from ament_index_python.packages import get_package_share_directory

        path = Path(get_package_share_directory("oxygen_ros")) / "config" / name
        if path.is_file():
            return path
    except Exception:  # noqa: BLE001 - not installed in an ament prefix
        pass
    raise FileNotFoundError(f"config/{name} not found (no checkout, not in the ament index)")


def params_from_file(path: str | Path) -> dict:
    """The ros__parameters of a node params file (the `/**` entry or the first node entry)."""
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    for key in ("/**", *data):
        entry = data.get(key)
        if isinstance(entry, dict) and "ros__parameters" in entry:
            return dict(entry["ros__parameters"])
    raise ValueError(f"{path}: no ros__parameters entry")


def with_node_defaults(params: dict) -> dict:
    """`params` (a params file's values) over every node parameter's default, as the node
    reads them (node/params.read): an unset parameter with no default is [] where it may be
    unset and left out where it is required."""
    from rclpy.parameter import Parameter

    from ..node.params import SPECS

    defaults = {s.name: [] if isinstance(s.default, Parameter.Type) else s.default
                for s in SPECS if not (s.required and isinstance(s.default, Parameter.Type))}
    return {**defaults, **params}


def robot_params(params: dict, robot: str) -> dict:
    """A params file's values as a fleet robot gets them: the shared ones with that robot's
    own section (`ROBOT: {...}`) over them; `robot` "" : the values as they are."""
    return {**params, **(params.get(robot) or {})} if robot else params
