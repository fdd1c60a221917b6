"""QoS profiles of the node's topics, in one place: the node offers them, and its peers
(simulated robot, recorder, demo monitor) ask for the same ones.

- Cameras and joint states: best effort, keep last (a late sensor sample is worthless).
- Trajectories, frame timing, text: reliable, volatile.
- Memory text: reliable, transient local (a late joiner gets the recent memory).
- Services (ask_progress): reliable, keep last 1000 (see SERVICES).
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

# The request queue of ~/ask_progress (and the response queue of its clients). A request
# waits in this DDS history until an executor thread takes it; keep-last drops the oldest
# request of a burst that outgrows it, and its caller then waits forever (the middleware
# default, depth 10, lost 37 of 50 simultaneous questions). The node admits
# max_concurrent_questions (<= 64) and answers every other question with a refusal at
# once, so the queue only has to hold one burst while those refusals are sent: 1000 is
# rclpy's own depth for the parameter services (qos_profile_parameters), whose samples
# are small and allocated only when a burst arrives.
SERVICES = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)
