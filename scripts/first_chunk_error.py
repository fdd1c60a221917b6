#!/usr/bin/env python3
"""How far a smol-panda checkpoint's first chunk lands from the scripted expert's plan: the
one decision of an episode that depends on the image alone (every episode starts at READY).
For each seed, the chunk from the first frame (several noise draws) against the plan's
target 1 s ahead, the largest joint's error in rad; training, held-out demonstration and
evaluation seeds side by side tell under-fitting from over-fitting (docs/training.md).

  .venv/bin/python scripts/first_chunk_error.py --checkpoint out/train/panda/checkpoint
"""
from __future__ import annotations

import argparse

import numpy as np

GROUPS = (("training seeds", (1001, 1002, 1003, 1004, 1005)),
          ("held-out demonstration seeds", (1000, 1020, 1040, 1060, 1080)),
          ("evaluation seeds", (900000, 900001, 900002, 900003, 900004)))
VIEWS = {"base_0_rgb": "base", "left_wrist_0_rgb": "left_wrist"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--draws", type=int, default=3, help="noise draws per seed")
    args = ap.parse_args()

    import torch

    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.smol_panda.training import hparams as hp
    from oxygen_ros.engine.models.smol_panda.training.data import policy_io
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.tools import panda_scene as ps, scripted_expert as se
    from oxygen_ros.tools.panda_world import PandaWorld

    model, tok = load_model("smol-panda", checkpoint=args.checkpoint)
    io = policy_io(args.checkpoint, tok, model.cfg)
    runner = IsolatedRunner(model, tok)
    ahead = se.CHUNK_POINTS - 1
    for group, seeds in GROUPS:
        errors, moves = [], []
        for seed in seeds:
            with PandaWorld() as world:
                world.set_layout(ps.layout(seed))
                plan = se.plan(world.model, world.layout, start=world.q)
                snap = world.snapshot()
                images = {slot: world.render(v, model.cfg.vision.image_size, snap) for slot, v in VIEWS.items()}
                state = np.asarray(world.q, np.float64)
            obs = io.observation(images, state, hp.INSTRUCTION, stamp=0.0)
            draws = []
            for k in range(args.draws):
                noise = torch.randn(se.CHUNK_POINTS, 8, generator=torch.Generator().manual_seed(k))
                robot = io.actions(runner.action(obs, noise).float().numpy(), state)
                draws.append(np.abs(robot[ahead, :7] - plan.targets[ahead, :7]).max())
            errors.append(float(np.mean(draws)))
            moves.append(float(np.abs(plan.targets[ahead, :7] - plan.targets[0, :7]).max()))
        print(f"{group}: first chunk's point 1 s ahead vs the plan, largest joint error {np.round(errors, 3)} rad, "
              f"mean {np.mean(errors):.3f} (the plan moves {np.mean(moves):.3f} rad in that second)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
