"""How the node's executor spins: the GIL switch interval it shares with the inference
thread, and a spin that survives rclpy's races with transitions and signals."""
from __future__ import annotations

from rclpy.executors import MultiThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

# The executor's Python work (wait sets, callbacks) and the inference thread share the
# GIL. The inference thread releases it around every torch op, and with the default
# 5 ms switch interval each release can cost it up to 5 ms (hundreds per frame).
GIL_SWITCH_INTERVAL_S = 0.0002


def spin(executor: MultiThreadedExecutor) -> None:
    """executor.spin(), surviving rclpy's race between a transition that destroys
    entities (cleanup runs in a worker thread) and the executor thread building its wait
    set from them: that spin raises InvalidHandle, and the next one rebuilds the set.
    A signal that shuts the context down while the wait set is being built makes rclpy
    raise RCLError ("context is not valid") instead of ExternalShutdownException: a
    shutdown all the same (it made SIGTERM exit 1 about one time in three)."""
    while executor.context.ok():
        try:
            executor.spin_once(timeout_sec=0.5)
        except _rclpy.InvalidHandle:
            continue
        except _rclpy.RCLError:
            if executor.context.ok():
                raise
