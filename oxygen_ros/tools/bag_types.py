"""Message types for rosbag2 files (rosbags): ROS 2 Jazzy's standard types plus oxygen_msgs.

The oxygen_msgs definitions come from the installed interface package (its share/
folder holds the .msg files, found through the ament index) or, in a source checkout,
from oxygen_msgs/msg/ next to this package. A bag written with this typestore carries
the definitions, so any reader (ros2 bag, Foxglove, mcap-ros2-support) decodes them
without oxygen_msgs installed. ROS-free: rosbags only.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

OXYGEN_MSGS = ("TextChunk", "FrameTiming")


def msg_dirs() -> list[Path]:
    """Folders that may hold oxygen_msgs' .msg files, most specific first."""
    dirs = []
    try:
        from ament_index_python.packages import get_package_share_directory

        dirs.append(Path(get_package_share_directory("oxygen_msgs")) / "msg")
    except Exception:  # noqa: BLE001 - not installed, or no ament index: try the others
        pass
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        dirs.append(Path(prefix) / "share" / "oxygen_msgs" / "msg")
    dirs.append(Path(__file__).resolve().parents[2] / "oxygen_msgs" / "msg")   # source checkout
    return dirs


def oxygen_msg_definitions() -> dict[str, str]:
    """{'oxygen_msgs/msg/TextChunk': text of TextChunk.msg, ...}; FileNotFoundError if absent."""
    for d in msg_dirs():
        files = [d / f"{name}.msg" for name in OXYGEN_MSGS]
        if all(f.is_file() for f in files):
            return {f"oxygen_msgs/msg/{f.stem}": f.read_text() for f in files}
    raise FileNotFoundError("oxygen_msgs .msg files not found in: " + ", ".join(map(str, msg_dirs())))


@lru_cache(maxsize=1)
def typestore():
    """The ROS 2 Jazzy typestore with oxygen_msgs registered."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    types = {}
    for name, text in oxygen_msg_definitions().items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store
