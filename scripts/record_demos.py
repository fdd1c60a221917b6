#!/usr/bin/env python3
"""Record the scripted expert's demonstrations for training (issue 41), one shard per episode.

    nice -n 19 .venv/bin/python scripts/record_demos.py --seeds 1000-1299 --out out/demos

Each seed places the cube and the bowl (panda_scene.layout); the expert
(tools/scripted_expert.py) runs one episode through the simulated joint_trajectory_controller,
and every frame (one per action, ACTION_RATE_HZ) is written as the node would see it: the
three cameras rendered the way `oxygen sim` renders them for the node (PandaWorld.render of
a physics snapshot, SIZE x SIZE rgb8, default the demo's 128), the joint states, the chunk
commanded from that frame, and the sim's ground truth. Training seeds are 1000-1999
(docs/training.md); 900000 and up are held out for evaluation and refused here.

A shard out/demos/episode_<seed>.npz (np.savez_compressed) holds, for T frames:
  image_base, image_left_wrist, image_right_wrist  uint8 [T, S, S, 3]
  time_s          float64 [T]      frame t's observation time (sim clock, s from the start)
  joint_position  float32 [T, 8]   measured: 7 Panda joint angles (rad), finger width (m)
  joint_velocity  float32 [T, 8]
  action_chunk    float32 [T, H, 8] targets commanded from frame t: point i due at time_s + i / action_rate_hz
  cube_pose, bowl_pose, gripper_pose  float32 [T, 7]  world frame: x, y, z (m), qw, qx, qy, qz
  grasp_contact   bool [T]          the cube touches both fingers
  phase           int8 [T]          index into phase_names (the expert's phase of the task)
  place           int8 [T]          index into place_names (tools/cube_place.py: table, gripper, bowl)
  seed, success, action_rate_hz, image_size, perturb_rad (0: clean), perturb_phases (the
  phases --perturb-phases confined the offsets to; empty: the free-space ones), start_offset_m (0: READY), phase_names, place_names, joint_names, format_version
Seeds already recorded are skipped, so a stopped run resumes.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

HELD_OUT_FROM = 900000        # the evaluation contract: these seeds never go into training data
VIEWS = ("base", "left_wrist", "right_wrist")     # the node's camera slots, in order


def seed_range(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def record_episode(world, seed: int, size: int, perturb_rad: float = 0.0, start_offset_m: float = 0.0,
                   perturb_phases: tuple = ()) -> tuple[dict, bool]:
    """One episode's arrays (the shard's keys) and its success; perturb_rad > 0: DART-style
    offsets of that size on the executed chunks (scripted_expert.Perturbation, seeded by the
    episode's seed), the recorded chunks the plan's, in `perturb_phases` only if given
    (Perturbation.confine) else in the free-space phases; start_offset_m > 0: the arm starts with
    its gripper moved from READY's by up to that much in x and y and half of it in z
    (uniform, seeded by the episode's seed), pointing down."""
    from oxygen_ros.tools import cube_place, panda_scene as ps, scripted_expert as se

    rows = {k: [] for k in ("time_s", "joint_position", "joint_velocity", "action_chunk", "cube_pose",
                            "bowl_pose", "gripper_pose", "grasp_contact", "phase", "place")}
    images = {v: [] for v in VIEWS}

    def on_frame(step, t, chunk, phase):
        state = world.snapshot()              # what the sim's camera thread renders
        for v in VIEWS:
            images[v].append(world.render(v, size, state))
        f = world.frames()
        rows["time_s"].append(t)
        rows["joint_position"].append(world.q)
        rows["joint_velocity"].append(world.velocities())
        rows["action_chunk"].append(chunk)
        for name in ("cube", "bowl", "gripper"):
            rows[f"{name}_pose"].append(np.concatenate(f[name]))
        rows["grasp_contact"].append(world.grasp_contact())
        rows["phase"].append(se.PHASE_NAMES.index(phase))
        rows["place"].append(cube_place.PLACES.index(cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0])))

    perturb = None
    if perturb_rad > 0:
        perturb = se.Perturbation(np.random.default_rng([seed, 7]), perturb_rad)
        if perturb_phases:
            perturb.phases, perturb.confine = tuple(perturb_phases), True
    placed = start_offset_m > 0
    if placed:                                   # rollout then plans from where the arm is
        world.set_layout(ps.layout(seed))
        offset = np.random.default_rng([seed, 11]).uniform(-1, 1, 3) * start_offset_m * np.array([1, 1, 0.5])
        world.set_joints(se.start_pose(world.model, offset))
    ep = se.rollout(world, None if placed else seed, on_frame=on_frame, perturb=perturb)
    out = {f"image_{v}": np.stack(images[v]).astype(np.uint8) for v in VIEWS}
    dtypes = {"time_s": np.float64, "grasp_contact": bool, "phase": np.int8, "place": np.int8}
    out.update({k: np.asarray(v, dtype=dtypes.get(k, np.float32)) for k, v in rows.items()})
    return out, ep.success


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=seed_range, default=seed_range("1000-1999"),
                    help="A-B inclusive (training seeds: 1000-1999)")
    ap.add_argument("--out", default="out/demos", help="folder of the shards (git-ignored under out/)")
    ap.add_argument("--image-size", type=int, default=128, help="camera images S x S (the demo's: 128)")
    ap.add_argument("--perturb", type=float, default=0.0, metavar="RAD",
                    help="DART-style noise: now and then offset the executed arm joints by about RAD "
                         "(normal) for 0.5 s in the free-space phases, labels stay the plan's (0: off)")
    ap.add_argument("--perturb-phases", type=lambda s: tuple(s.split(",")), default=(), metavar="P,Q",
                    help="with --perturb: offsets only in these expert phases, ended when they end "
                         "(e.g. align,descend: the gripper comes down off the cube and is led back)")
    ap.add_argument("--start-offset", type=float, default=0.0, metavar="M",
                    help="start the arm away from READY: the gripper moved up to M in x and y, M/2 in z "
                         "(uniform, seeded), pointing down (0: from READY)")
    ap.add_argument("--keep-failures", action="store_true",
                    help="also write episodes the expert failed (success=False in the shard)")
    args = ap.parse_args()
    from oxygen_ros.tools import scripted_expert as se
    if unknown := [p for p in args.perturb_phases if p not in se.PHASE_NAMES]:
        ap.error(f"--perturb-phases: no phase {', '.join(unknown)} (phases: {', '.join(se.PHASE_NAMES)})")
    if any(s >= HELD_OUT_FROM for s in args.seeds):
        print(f"record_demos: seeds from {HELD_OUT_FROM} up are held out for evaluation", file=sys.stderr)
        return 2

    from oxygen_ros.tools.demo_shard import shard_path, write_shard
    from oxygen_ros.tools.panda_world import PandaWorld

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in args.seeds if not shard_path(out, s).exists()]
    print(f"record_demos: {len(todo)} of {len(args.seeds)} seeds to record into {out} "
          f"({args.image_size}x{args.image_size}, {se.ACTION_RATE_HZ:g} Hz)", flush=True)
    start, done, failed = time.monotonic(), 0, 0
    for seed in todo:
        t0 = time.monotonic()
        with PandaWorld() as world:          # fresh physics; its renderers closed at the end
            arrays, success = record_episode(world, seed, args.image_size, args.perturb, args.start_offset,
                                             args.perturb_phases)
        done += 1
        if not success:
            failed += 1
            if not args.keep_failures:
                print(f"seed {seed}: the expert failed; not written", flush=True)
                continue
        write_shard(out, seed, arrays, success=success, action_rate_hz=se.ACTION_RATE_HZ, image_size=args.image_size,
                    phase_names=se.PHASE_NAMES, perturb_rad=args.perturb, perturb_phases=args.perturb_phases,
                    start_offset_m=args.start_offset)
        elapsed = time.monotonic() - start
        size_mb = sum(f.stat().st_size for f in out.glob("episode_*.npz")) / 1e6
        print(f"seed {seed}: {len(arrays['time_s'])} frames, success {success}, {time.monotonic() - t0:.1f} s; "
              f"{done}/{len(todo)} in {elapsed / 60:.1f} min ({done / elapsed * 60:.2f} episodes/min), "
              f"{failed} failed, {size_mb:.0f} MB on disk", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
