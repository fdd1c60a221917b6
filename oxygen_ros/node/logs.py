"""The node's per-topic child loggers and the throttle period its repeated log lines share.

One child logger per input or topic, so throttling one problem never hides another.
"""
from __future__ import annotations

import re

LOG_THROTTLE_S = 2.0


class ChildLoggers:
    """`loggers(key)`: the child logger of `key` (an input, a topic, a concern), made once;
    `loggers(key, robot)`: a fleet robot's own (ROBOT_KEY)."""

    def __init__(self, logger):
        self._logger = logger
        self._children = {}

    def __call__(self, key: str, robot: str = ""):
        key = f"{robot}.{key}" if robot else key
        if key not in self._children:
            self._children[key] = self._logger.get_child(re.sub(r"\W+", "_", key).strip("_") or "x")
        return self._children[key]
