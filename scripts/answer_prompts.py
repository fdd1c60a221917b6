#!/usr/bin/env python3
"""Answer templates for "what have you done?" on the trained smol-panda policy, side by side:
each template answers four scenes (rendered in the Panda scene on held-out layouts, each with
the memory log the node would hold by then) through the engine's isolated path, greedily, and
each answer is judged by a plain rule (training/progress.py answer_right):

  not_yet   (cube on the table; notes: table)                 a denial ("not", "nothing", "yet"), no bowl
  holding   (cube in the gripper; notes: table, table, gripper) a pick word, no loss ("fell"), no bowl
  done      (cube in the bowl; notes: table, gripper, bowl)    "bowl" with put / placed / in the bowl
  dropped   (cube on the table; notes: table, gripper, table)  a pick and its loss, neither holding nor the bowl

The third question is not among those the learned prompt was trained with (hparams.QUESTIONS).

Templates come from a file, separated by lines "=====", written as in a params file (\\n for
a newline); without one, config/smol_panda.yaml's answer_prompt.

  .venv/bin/python scripts/answer_prompts.py [--templates FILE] [--checkpoint DIR]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

VIEWS = {"base_0_rgb": "base", "left_wrist_0_rgb": "left_wrist"}
LAYOUT_SEEDS = (900300, 900301, 900302)            # evaluation seeds: never in training
QUESTIONS = ("What have you done?", "what have you done so far?", "What have you achieved?")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", type=Path, help="templates separated by '=====' lines")
    ap.add_argument("--checkpoint", default="", help="smol-panda checkpoint (default: the shipped weights)")
    args = ap.parse_args()

    import torch

    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.smol_panda.checkpoint import SHIPPED_DIR
    from oxygen_ros.engine.models.smol_panda.training import hparams as hp
    from oxygen_ros.engine.models.smol_panda.training.data import policy_io
    from oxygen_ros.engine.models.smol_panda.training.progress import answer_right
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.engine.text.prompts import fill_answer
    from oxygen_ros.tools import panda_scene as ps, scripted_expert as se
    from oxygen_ros.tools.panda_world import PandaWorld
    from oxygen_ros.tools.params_files import config_file, params_from_file

    if args.templates:
        templates = [t.strip("\n") for t in args.templates.read_text().split("\n=====\n")]
        templates = [t.encode().decode("unicode_escape") for t in templates]
    else:
        templates = [params_from_file(config_file("smol_panda.yaml"))["answer_prompt"]]
    checkpoint = args.checkpoint or str(SHIPPED_DIR)
    c = hp.CAPTIONS
    scenes = {  # progress: (the expert's phase the arm is posed in, where the cube goes, memory log)
        "not_yet": ("pre_grasp", "table", [c["table"]]),
        "holding": ("carry", "gripper", [c["table"], c["table"], c["gripper"]]),
        "done": ("release", "bowl", [c["table"], c["gripper"], c["bowl"]]),
        "dropped": ("carry", "table", [c["table"], c["gripper"], c["table"]]),
    }

    torch.set_num_threads(1)
    model, tok = load_model("smol-panda", checkpoint=checkpoint)
    io = policy_io(checkpoint, tok, model.cfg)
    runner = IsolatedRunner(model, tok)
    observations = {}
    for name, (phase, cube, _) in scenes.items():
        for seed in LAYOUT_SEEDS:
            with PandaWorld() as world:
                layout = ps.layout(seed)
                world.set_layout(layout)
                plan = se.plan(world.model, layout)
                world.set_joints(plan.targets[plan.phases.index(phase)])
                if cube == "bowl":
                    world.put_cube((*layout.bowl_xy, ps.CUBE_REST_Z + 0.005))
                elif cube == "gripper":
                    world.put_cube(world.gripper_position())
                snap = world.snapshot()
                images = {slot: world.render(v, model.cfg.vision.image_size, snap) for slot, v in VIEWS.items()}
                observations[name, seed] = io.observation(images, np.asarray(world.q, np.float64), hp.INSTRUCTION,
                                                          stamp=0.0)
    for i, template in enumerate(templates):
        print(f"template {i}: {template!r}")
        score = 0
        for name, (_, _, memory) in scenes.items():
            for seed in LAYOUT_SEEDS:
                for question in QUESTIONS:
                    deltas = []
                    runner.language(observations[name, seed],
                                    LanguageRequest(fill_answer(template, memory, question), max_new_tokens=40),
                                    deltas=deltas)
                    answer = deltas[-1].full_text if deltas else ""
                    ok = answer_right(name, answer)
                    score += ok
                    print(f"  {'+' if ok else '-'} {name:9s} {seed} {question!r:30s} {answer!r}", flush=True)
        print(f"template {i}: {score}/{len(scenes) * len(LAYOUT_SEEDS) * len(QUESTIONS)} right")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
