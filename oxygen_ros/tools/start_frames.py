"""Frames of the arm at the start of an episode over many layouts no demonstration has, for
stage 1 of the smol-panda training (its auxiliary heads learn from them where the cube is
when it is far from the gripper: the demonstrations show each layout in one episode only, a
few hundred in all, and from READY the cube is a few pixels in the front camera; the
encoder placed it to 7 cm on held-out starts, 1.9 cm anywhere, after 2,000 steps on them
alone). Read by training/data.load_start_frames.

Rendered once into one .npz (about 65 ms a layout): layouts from seeds START_SEED up (a free
range: neither training demonstrations, 1000-1999, nor held out, 900000 up), the arm at
READY or at a start up to `offset_m` away (scripted_expert.start_pose, as record_demos
--start-offset), or off the path (below); keys as a demonstration's (image_<view>, joint_position,
cube_pose, bowl_pose, gripper_pose, place: the cube's place by tools/cube_place) and first_seed.

With `off_path_plans` (the default), half of the frames show what no demonstration does, so the
narration learns to read the cube, not the arm (a checkpoint trained without them said "bowl"
whenever the arm was where the expert carries, `scripts/off_path_narration.py`): the arm
where the expert lifts, carries, lowers or releases while the cube stays on the table, and
the arm where it reaches while the cube already lies in the bowl. Their arm poses come from
the expert's plans for that many layouts (planning takes 1-2 s a layout)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from . import cube_place, panda_scene as ps, scripted_expert as se
from .panda_world import PandaWorld

START_SEED = 100_000
VIEWS = ("base", "left_wrist")       # the trained profile's cameras
CARRYING = ("lift", "carry", "lower", "release")      # the cube stays on the table meanwhile
REACHING = ("pre_grasp", "align", "descend")          # the cube already in the bowl meanwhile


def _arm_poses(world: PandaWorld, first_seed: int, plans: int) -> dict:
    """{"carrying" | "reaching": [8] joint targets} from the expert's plans for `plans` layouts."""
    poses = {"carrying": [], "reaching": []}
    for k in range(plans):
        layout = ps.layout(first_seed + k)
        world.set_layout(layout)
        plan = se.plan(world.model, layout)
        for target, phase in zip(plan.targets, plan.phases):
            if phase in CARRYING:
                poses["carrying"].append(target)
            elif phase in REACHING:
                poses["reaching"].append(target)
    return poses


def render(path: Path, count: int, size: int = 128, offset_m: float = 0.18, first_seed: int = START_SEED,
           off_path_plans: int = 24) -> Path:
    """Frame i: the layout of seed first_seed + i; by i % 4 (i % 2 with off_path_plans 0): the
    arm at READY, at a start moved from it, carrying over a cube left on the table, reaching
    for a cube already in the bowl."""
    path = Path(path)
    rows = {k: [] for k in ("joint_position", "cube_pose", "bowl_pose", "gripper_pose", "place",
                            *(f"image_{v}" for v in VIEWS))}
    t0 = time.time()
    with PandaWorld() as world:
        poses = _arm_poses(world, first_seed, off_path_plans)
        for i in range(count):
            seed = first_seed + i
            rng = np.random.default_rng([seed, 11])
            layout = ps.layout(seed)
            world.set_layout(layout)
            kind = i % 4 if off_path_plans else i % 2
            start = ps.READY
            if kind == 1:
                offset = rng.uniform(-1, 1, 3) * offset_m * np.array([1, 1, 0.5])
                start = se.start_pose(world.model, offset)
            elif kind >= 2:
                group = poses["carrying" if kind == 2 else "reaching"]
                start = group[rng.integers(len(group))]
            world.set_joints(start)
            if kind == 3:     # resting on the bowl's floor, anywhere inside its wall
                xy = np.asarray(layout.bowl_xy) + rng.uniform(-1, 1, 2) * (ps.BOWL_INNER_RADIUS - ps.CUBE_HALF * 1.5) / 2
                world.put_cube((*xy, ps.CUBE_REST_Z + 0.005), rng.uniform(-np.pi / 4, np.pi / 4))
            snap = world.snapshot()
            for view in VIEWS:
                rows[f"image_{view}"].append(world.render(view, size, snap))
            f = world.frames()
            rows["joint_position"].append(world.q)
            for name in ("cube", "bowl", "gripper"):
                rows[f"{name}_pose"].append(np.concatenate(f[name]))
            rows["place"].append(cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0]))
            if (i + 1) % 500 == 0 or i + 1 == count:
                print(f"start frames: {i + 1}/{count} rendered, {time.time() - t0:.0f} s", flush=True)
    places = np.array(rows.pop("place"))
    out = {k: np.stack(v).astype(np.uint8 if k.startswith("image_") else np.float32) for k, v in rows.items()}
    out["place"] = places
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, first_seed=np.int64(first_seed), **out)
    tmp.rename(path)
    return path
