#!/usr/bin/env python3
"""Do smol-panda's words come from the image? Narrate the same frames twice, with their
cameras and with black images (the state, hence the prompt, unchanged), through the engine's
isolated path, and score both by issue 41's rule beside what guessing gives.

`oxygen eval --cameras off` blacks out the cameras of whole episodes, where the blind arm
never moves the cube: its truth is "table" throughout, so a narration that always says
"table" scores 100% there. Frames where the place varies (held-out episodes of the policy's
own rollouts or of the demonstrations) tell the image's part apart.

  .venv/bin/python scripts/blind_narration.py --demos out/rollouts [--every 2] [--checkpoint DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demos", default="out/rollouts", help="shards (their held-out episodes: seed %% 20 == 0)")
    ap.add_argument("--every", type=int, default=2, help="every k-th frame of each held-out episode")
    ap.add_argument("--checkpoint", default=None, help="default: the shipped weights")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(2)
    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.smol_panda.checkpoint import SHIPPED_DIR
    from oxygen_ros.engine.models.smol_panda.training import hparams as H
    from oxygen_ros.engine.models.smol_panda.training.data import Demos, policy_io
    from oxygen_ros.engine.models.smol_panda.training.narration import prompt_for
    from oxygen_ros.engine.models.smol_panda.training.stage1 import narration_accuracy
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.requests import LanguageRequest

    checkpoint = args.checkpoint or str(SHIPPED_DIR)
    model, tok = load_model("smol-panda", checkpoint=checkpoint)
    io = policy_io(Path(checkpoint), tok, model.cfg)
    runner = IsolatedRunner(model, tok)
    demos = Demos(args.demos, "held_out")
    if not demos.episodes:
        raise SystemExit(f"blind_narration.py: no held-out episodes (seed % 20 == 0) in {args.demos}")
    results = {"cameras": [], "black": []}
    said = {"cameras": Counter(), "black": Counter()}
    for i in range(0, len(demos), args.every):
        e, t = demos.frames[i]
        ep = demos.episodes[e]
        for mode in results:
            images = {s: ep.images[s][t] if mode == "cameras" else np.zeros_like(ep.images[s][t]) for s in H.CAMERAS}
            obs = io.observation(images, ep.state[t], H.INSTRUCTION)
            deltas = []
            runner.language(obs, LanguageRequest(prompt_for(model), max_new_tokens=12), deltas=deltas)
            text = deltas[-1].full_text if deltas else ""
            results[mode].append((int(ep.place[t]), text))
            said[mode][text] += 1
    places = Counter(H.PLACES[p] for p, _ in results["cameras"])
    report = {"frames": len(results["cameras"]), "episodes": len(demos.episodes), "places": dict(places),
              "guess_uniform": 1 / 3, "guess_commonest": max(places.values()) / sum(places.values()),
              **{mode: {**narration_accuracy(res), "said": dict(said[mode].most_common(4))}
                 for mode, res in results.items()}}
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
