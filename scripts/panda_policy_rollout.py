#!/usr/bin/env python3
"""A quick closed-loop check of a smol-panda checkpoint in the Panda scene, without ROS: sim
time (the physics waits while the model thinks), the node's chunk execution (plan_chunk and
the simulated joint_trajectory_controller), scored by the place rule. For judging a training
run between checkpoints; the project's evaluation is `oxygen eval` (real node, DDS, bags).

  .venv/bin/python scripts/panda_policy_rollout.py --checkpoint out/train/panda/checkpoint \\
      --seeds 900000-900002 [--replan 5] [--seconds 14] [--narrate-every 10]

`--record DIR` writes each episode as a shard in record_demos.py's format (every
`--record-every`-th 10 Hz frame: the cameras, joint states and the sim's ground truth) with
`source: policy`: the states the policy itself visits, captioned by the ground truth, for
the learned narration prompt (docs/training.md, "Narration rows"). Training seeds only
(1000-1999); the expert is never trained on these (stage 2 refuses them).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def seed_range(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


class ShardWriter:
    """One policy episode's frames in record_demos.py's shard format (source "policy"): the
    two cameras the model reads, joint states, the sim's ground truth, and as action_chunk
    the rest of the policy's own chunk (padded with its last point): what it did, not a
    demonstration."""

    def __init__(self, world):
        self.world, self.rows = world, {}

    def add(self, t, images, frames, place, chunk, done):
        """Frame t's row; `chunk` the policy's latest, `done` of its points already due."""
        from oxygen_ros.tools import cube_place

        chunk = np.concatenate([chunk[done:], np.repeat(chunk[-1:], done, 0)])
        row = {"time_s": t, "joint_position": self.world.q, "joint_velocity": self.world.velocities(),
               "action_chunk": chunk, "grasp_contact": self.world.grasp_contact(), "phase": 0,
               "place": cube_place.PLACES.index(place),
               "image_base": images["base_0_rgb"], "image_left_wrist": images["left_wrist_0_rgb"]}
        for name in ("cube", "bowl", "gripper"):
            row[f"{name}_pose"] = np.concatenate(frames[name])
        for k, v in row.items():
            self.rows.setdefault(k, []).append(np.asarray(v))

    def write(self, out: Path, seed: int, success: bool, size: int, checkpoint: str) -> Path:
        from oxygen_ros.tools import scripted_expert as se
        from oxygen_ros.tools.demo_shard import write_shard

        dtypes = {"time_s": np.float64, "grasp_contact": bool, "phase": np.int8, "place": np.int8,
                  "image_base": np.uint8, "image_left_wrist": np.uint8}
        arrays = {k: np.stack(v).astype(dtypes.get(k, np.float32)) for k, v in self.rows.items()}
        return write_shard(out, seed, arrays, success=success, action_rate_hz=se.ACTION_RATE_HZ, image_size=size,
                           phase_names=["policy"], source="policy", checkpoint=str(checkpoint))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--seeds", default="900000-900002")
    ap.add_argument("--replan", type=int, default=5, help="action steps executed per chunk (10 Hz)")
    ap.add_argument("--seconds", type=float, default=14.0)
    ap.add_argument("--narrate-every", type=int, default=10, help="frames between narrations; 0 = none")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--settle", type=float, default=0.0,
                    help="end an episode once the cube has been in the bowl this long (s; 0: run --seconds)")
    ap.add_argument("--record", default=None, metavar="DIR", help="write each episode's frames as a shard here")
    ap.add_argument("--record-every", type=int, default=2, help="with --record: every k-th 10 Hz frame")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.record and any(not 1000 <= s <= 1999 for s in seed_range(args.seeds)):
        ap.error("--record: training seeds only (1000-1999); 900000 and up are held out for evaluation")

    import torch

    torch.set_num_threads(args.threads)
    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.smol_panda.training import hparams as hp
    from oxygen_ros.engine.models.smol_panda.training.data import policy_io
    from oxygen_ros.engine.models.smol_panda.training.narration import prompt_for
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.node.chunk_plan import plan_chunk
    from oxygen_ros.tools import cube_place, panda_scene as ps, scripted_expert as se
    from oxygen_ros.tools.demo_shard import shard_path
    from oxygen_ros.tools.panda_world import PandaWorld
    from oxygen_ros.tools.trajectory_executor import TrajectoryExecutor

    model, tok = load_model("smol-panda", checkpoint=args.checkpoint)
    io = policy_io(args.checkpoint, tok, model.cfg)
    runner = IsolatedRunner(model, tok)
    views = {"base_0_rgb": "base", "left_wrist_0_rgb": "left_wrist"}
    dt, tick = 1.0 / se.ACTION_RATE_HZ, 1.0 / se.CONTROL_HZ
    results = []
    for seed in seed_range(args.seeds):
        if args.record and shard_path(Path(args.record), seed).exists():
            continue                       # recorded before: a stopped run resumes
        t0 = time.time()
        with PandaWorld() as world:
            world.set_layout(ps.layout(seed))
            executor = TrajectoryExecutor(world.names, world.q)
            places, said, narr_right, closest, trace = [], [], 0, np.inf, []
            shard = ShardWriter(world) if args.record else None
            gen = torch.Generator().manual_seed(seed)
            robot = None
            for step in range(int(args.seconds * se.ACTION_RATE_HZ)):
                t = step * dt
                f = world.frames()
                place = cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0])
                places.append(place)
                if args.settle and places[-int(round(args.settle / dt)) - 1:].count("bowl") > args.settle / dt:
                    break
                closest = min(closest, float(np.linalg.norm(np.asarray(f["cube"][0]) - np.asarray(f["gripper"][0]))))
                recording = shard is not None and step % args.record_every == 0
                if step % args.replan == 0 or (args.narrate_every and step % args.narrate_every == 0) or recording:
                    snap = world.snapshot()
                    images = {slot: world.render(v, model.cfg.vision.image_size, snap) for slot, v in views.items()}
                    state = np.asarray(world.q, np.float64)
                    obs = io.observation(images, state, hp.INSTRUCTION, stamp=t)
                if args.narrate_every and step % args.narrate_every == 0:
                    deltas = []
                    runner.language(obs, LanguageRequest(prompt_for(model), max_new_tokens=10), deltas=deltas)
                    text = deltas[-1].full_text if deltas else ""
                    words = [w for w in cube_place.PLACES if w in text.lower()]
                    narr_right += words == [place]
                    said.append((round(t, 1), place, text))
                if step % args.replan == 0:
                    chunk = runner.action(obs, torch.randn(10, 8, generator=gen)).float().numpy()
                    robot = io.actions(chunk, state)
                    # where the arm is and what it asks the gripper to do, per chunk (--json)
                    trace.append((round(t, 1), [round(float(v), 3) for v in f["gripper"][0]],
                                  [round(float(v), 3) for v in f["cube"][0]], round(float(robot[0, 7]), 3)))
                    c = plan_chunk(robot, t, dt, now_s=t, with_velocities=True)
                    executor.receive(world.names, c.stamp_s, c.times, c.positions, c.velocities, now=t)
                if recording:          # after the chunk: the frame's targets are the chunk's rest
                    shard.add(t, images, f, place, robot, step % args.replan)
                for k in range(int(round(dt / tick))):
                    world.command(executor.sample(t + (k + 1) * tick)[0])
                    world.step(tick)
            f = world.frames()
            places.append(cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0]))
        ok = cube_place.success(places)
        if shard is not None:
            shard.write(Path(args.record), seed, ok, model.cfg.vision.image_size, args.checkpoint)
        spans = []
        for p in places:
            if not spans or spans[-1][0] != p:
                spans.append([p, 0])
            spans[-1][1] += 1
        res = {"seed": seed, "success": ok, "final_place": places[-1], "places": spans,
               "closest_gripper_cube_m": round(closest, 3), "narration_right": narr_right, "narrations": len(said), "said": said[:20], "trace": trace,
               "wall_s": round(time.time() - t0, 1)}
        results.append(res)
        print(json.dumps({k: res[k] for k in ("seed", "success", "final_place", "places", "closest_gripper_cube_m", "narration_right",
                                              "narrations", "wall_s")}), flush=True)
    n_ok = sum(r["success"] for r in results)
    print(f"success {n_ok}/{len(results)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
