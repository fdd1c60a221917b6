"""Frames of the arm at the start of an episode over many layouts no demonstration has, for
stage 1 of the smol-panda training (its auxiliary heads learn from them where the cube is
when it is far from the gripper: the demonstrations show each layout in one episode only, a
few hundred in all, and from READY the cube is a few pixels in the front camera; the
encoder placed it to 7 cm on held-out starts, 1.9 cm anywhere, after 2,000 steps on them
alone). Read by training/data.load_start_frames.

Rendered once into one .npz (about 65 ms a layout): layouts from seeds START_SEED up (a free
range: neither training demonstrations, 1000-1999, nor held out, 900000 up), the arm at
READY or, every other frame, at a start up to `offset_m` away (scripted_expert.start_pose, as
record_demos --start-offset); keys as a demonstration's (image_<view>, joint_position,
cube_pose, bowl_pose, gripper_pose) and first_seed."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from . import panda_scene as ps, scripted_expert as se
from .panda_world import PandaWorld

START_SEED = 100_000
VIEWS = ("base", "left_wrist")       # the trained profile's cameras


def render(path: Path, count: int, size: int = 128, offset_m: float = 0.18, first_seed: int = START_SEED) -> Path:
    path = Path(path)
    rows = {k: [] for k in ("joint_position", "cube_pose", "bowl_pose", "gripper_pose", *(f"image_{v}" for v in VIEWS))}
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
            for view in VIEWS:
                rows[f"image_{view}"].append(world.render(view, size, snap))
            f = world.frames()
            rows["joint_position"].append(world.q)
            for name in ("cube", "bowl", "gripper"):
                rows[f"{name}_pose"].append(np.concatenate(f[name]))
            if (i + 1) % 500 == 0 or i + 1 == count:
                print(f"start frames: {i + 1}/{count} rendered, {time.time() - t0:.0f} s", flush=True)
    out = {k: np.stack(v).astype(np.uint8 if k.startswith("image_") else np.float32) for k, v in rows.items()}
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, first_seed=np.int64(first_seed), **out)
    tmp.rename(path)
    return path
