"""QoS profiles of the node's topics, in one place: the node offers them, and its peers
(simulated robot, recorder, demo monitor) ask for the same ones.

- Cameras and joint states: best effort, keep last (a late sensor sample is worthless).
- Trajectories, frame timing, text: reliable, volatile.
- Memory text: reliable, transient local (a late joiner gets the recent memory).
"""
from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

SENSOR = qos_profile_sensor_data


def reliable(depth: int) -> QoSProfile:
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def latched(depth: int) -> QoSProfile:
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)


CONTROL = reliable(10)    # trajectories and frame timing
TEXT = reliable(100)      # narration and answer deltas: a burst of requests finishing at once
