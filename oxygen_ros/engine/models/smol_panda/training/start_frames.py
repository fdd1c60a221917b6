"""Frames of the arm at the start of an episode, over many layouts no demonstration has:
stage 1's auxiliary heads learn from them where the cube is (and how it is turned) when it
is far from the gripper. The demonstrations show each layout in only one episode, a few
hundred in all; from READY the cube is a few pixels in the front camera and a corner of
the wrist camera's view, and the encoder placed it to 7 cm on held-out starts (1.9 cm
anywhere in an episode) after 2,000 steps on them alone.

Rendered once into <root>/start_frames.npz (about 65 ms a layout): layouts from seeds
START_SEED up (a free range: neither training demonstrations, 1000-1999, nor held out,
900000 up), the arm at READY or, every other frame, at a start up to `offset_m` away
(scripted_expert.start_pose, as record_demos --start-offset)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from . import hparams as H
from .data import Episode, yaw

START_SEED = 100_000


def render(path: Path, count: int, size: int = 128, offset_m: float = 0.18, first_seed: int = START_SEED) -> Path:
    from .....tools import panda_scene as ps, scripted_expert as se
    from .....tools.panda_world import PandaWorld

    views = {slot: key.removeprefix("image_") for slot, key in H.CAMERAS.items()}
    rows = {k: [] for k in ("joint_position", "cube_pose", "bowl_pose", "gripper_pose", *H.CAMERAS.values())}
    t0 = time.time()
    with PandaWorld() as world:
        for i in range(count):
            seed = first_seed + i
            world.set_layout(ps.layout(seed))
            start = ps.READY
            if i % 2:
                offset = np.random.default_rng([seed, 11]).uniform(-1, 1, 3) * offset_m * np.array([1, 1, 0.5])
                start = se.start_pose(world.model, offset)
            world.set_joints(start)
            snap = world.snapshot()
            for slot, view in views.items():
                rows[H.CAMERAS[slot]].append(world.render(view, size, snap))
            f = world.frames()
            rows["joint_position"].append(world.q)
            for name in ("cube", "bowl", "gripper"):
                rows[f"{name}_pose"].append(np.concatenate(f[name]))
            if (i + 1) % 500 == 0 or i + 1 == count:
                print(f"start frames: {i + 1}/{count} rendered, {time.time() - t0:.0f} s", flush=True)
    out = {k: np.stack(v).astype(np.uint8 if k.startswith("image_") else np.float32) for k, v in rows.items()}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, first_seed=np.int64(first_seed), **out)
    tmp.rename(path)
    return path


def load(path: Path) -> Episode:
    """The frames as one pseudo-episode (each frame its own layout): the cube on the table,
    no grasp; no actions (stage 1 does not read them)."""
    with np.load(path) as d:
        n = len(d["joint_position"])
        return Episode(seed=int(d["first_seed"]), images={slot: d[key] for slot, key in H.CAMERAS.items()},
                       state=d["joint_position"], actions=np.zeros((n, 0, 8), np.float32),
                       place=np.zeros(n, np.int8), grasp=np.zeros(n, bool),
                       cube=d["cube_pose"][:, :3], gripper=d["gripper_pose"][:, :3], bowl=d["bowl_pose"][:, :3],
                       cube_yaw=yaw(d["cube_pose"][:, 3:]), gripper_yaw=yaw(d["gripper_pose"][:, 3:]))
