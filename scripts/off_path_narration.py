#!/usr/bin/env python3
"""Does a smol-panda checkpoint's narration read the cube or the arm? Frames no demonstration
shows: the arm where the expert lifts, carries or lowers the cube while the cube stays on the
table, and the arm where it reaches while the cube is already in the bowl. Narrated greedily
through the engine's isolated path and scored by issue 41's rule (one place word, the right
one). A narration that follows the arm's pose says "bowl" / "table" there.

  .venv/bin/python scripts/off_path_narration.py --checkpoint out/train/panda_v4/checkpoint_1000
"""
from __future__ import annotations

import argparse

import numpy as np

VIEWS = {"base_0_rgb": "base", "left_wrist_0_rgb": "left_wrist"}
FIRST_SEED = 900100          # evaluation seeds: never in training


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--frames", type=int, default=16, help="frames, half of each case")
    args = ap.parse_args()

    import torch

    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.smol_panda.training import hparams as hp
    from oxygen_ros.engine.models.smol_panda.training.data import policy_io
    from oxygen_ros.engine.models.smol_panda.training.narration import prompt_for
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.tools import cube_place, panda_scene as ps, scripted_expert as se
    from oxygen_ros.tools.panda_world import PandaWorld
    from oxygen_ros.tools.start_frames import CARRYING, REACHING

    # the off-path kinds stage 1's start frames teach (tools/start_frames.py), on other layouts
    cases = (("arm carrying, cube on the table", CARRYING, False), ("arm reaching, cube in the bowl", REACHING, True))

    torch.set_num_threads(1)
    model, tok = load_model("smol-panda", checkpoint=args.checkpoint)
    io = policy_io(args.checkpoint, tok, model.cfg)
    runner = IsolatedRunner(model, tok)
    rng = np.random.default_rng(0)
    tally = {name: [0, 0] for name, _, _ in cases}
    for i in range(args.frames):
        name, phases, in_bowl = cases[i % 2]
        seed = FIRST_SEED + i
        with PandaWorld() as world:
            layout = ps.layout(seed)
            world.set_layout(layout)
            plan = se.plan(world.model, layout)
            world.set_joints(plan.targets[rng.choice([k for k, ph in enumerate(plan.phases) if ph in phases])])
            if in_bowl:
                world.put_cube((*layout.bowl_xy, ps.CUBE_REST_Z + 0.005))
            f = world.frames()
            place = cube_place.place(f["cube"][0], f["bowl"][0], f["gripper"][0])
            snap = world.snapshot()
            images = {slot: world.render(v, model.cfg.vision.image_size, snap) for slot, v in VIEWS.items()}
            state = np.asarray(world.q, np.float64)
        deltas = []
        runner.language(io.observation(images, state, hp.INSTRUCTION, stamp=0.0),
                        LanguageRequest(prompt_for(model), max_new_tokens=10), deltas=deltas)
        text = deltas[-1].full_text if deltas else ""
        said = [w for w in cube_place.PLACES if w in text.lower()]
        tally[name][0] += said == [place]
        tally[name][1] += 1
        print(f"seed {seed}: {name}; the cube's place {place}; said {text!r}", flush=True)
    for name, (right, n) in tally.items():
        print(f"{name}: {right}/{n} right")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
