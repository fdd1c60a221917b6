"""Where the cube is, by the evaluation contract (issue 41), from the sim's ground truth
(the `cube`, `bowl` and `gripper` frames `oxygen sim` publishes on /tf, metres, parent
`world`). ROS-free: numpy and the scene's dimensions.

The cube's place at a time:
- "gripper": its centre within GRIP_DISTANCE (4 cm) of the gripper frame (the fingertips'
  centre) and at least LIFT (1 cm) above its resting height on the table;
- "bowl": otherwise, its horizontal distance to the bowl's centre below the bowl's inner
  radius and its centre below the rim (panda_scene.BOWL_INNER_RADIUS, BOWL_HEIGHT);
- "table": otherwise.
An episode succeeds when the cube is in the bowl at its end.
"""
from __future__ import annotations

import numpy as np

from . import panda_scene as ps

PLACES = ("table", "gripper", "bowl")


def where(place_name: str) -> str:
    """'on the table', 'in the gripper', 'in the bowl'."""
    return f"{'on' if place_name == 'table' else 'in'} the {place_name}"


GRIP_DISTANCE = 0.04
LIFT = 0.01


def place(cube, bowl, gripper) -> str:
    """The cube's place for the positions [x, y, z] (world frame, m) of the cube's centre,
    the bowl's frame (its centre, on the table top) and the gripper frame."""
    cube, bowl, gripper = (np.asarray(v, dtype=float) for v in (cube, bowl, gripper))
    # a cube resting in the bowl is lifted by the bowl's floor only (8 mm < LIFT): near the
    # fingers that have just let go it counts as in the bowl, not in the gripper
    if np.linalg.norm(cube - gripper) < GRIP_DISTANCE and cube[2] >= ps.CUBE_REST_Z + LIFT:
        return "gripper"
    if np.linalg.norm(cube[:2] - bowl[:2]) < ps.BOWL_INNER_RADIUS and cube[2] < bowl[2] + ps.BOWL_HEIGHT:
        return "bowl"
    return "table"


def success(places) -> bool:
    """The episode's success: the last place is "bowl" (False for no places)."""
    places = list(places)
    return bool(places) and places[-1] == "bowl"


def segments(times, places) -> list[dict]:
    """Runs of one place: [{"place", "start_s", "end_s"}], each from its first sample to
    the next run's first (the last to the last sample)."""
    out = []
    for t, p in zip(times, places):
        if out and out[-1]["place"] == p:
            continue
        if out:
            out[-1]["end_s"] = float(t)
        out.append({"place": p, "start_s": float(t), "end_s": float(t)})
    if out:
        out[-1]["end_s"] = float(times[-1])
    return out
