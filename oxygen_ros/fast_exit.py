"""Ending a ROS process at once when it has closed everything it owns (oxygen_node, `oxygen
record`, `oxygen sim`): the interpreter's own teardown (torch's and Fast DDS's destructors)
takes a second or more and has nothing left to do, and a stop should take well under 2 s."""
from __future__ import annotations

import ctypes
import os
import sys


def exit_now(code: int) -> None:
    """Flush Python's and C's standard streams (rcutils writes through C stdio), then _exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    ctypes.CDLL(None).fflush(None)
    os._exit(code)
