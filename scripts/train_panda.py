#!/usr/bin/env python3
"""Train the smol-panda profile on the Panda demonstrations (docs/training.md).

  scripts/train_panda.py stage1  [--root out/train/panda] [--demos out/demos] [--steps N] [--until N]
  scripts/train_panda.py kvcache [--root ...] [--demos ...] [--checkpoint DIR|shipped]  # stage 2's prefix K/V, once
  scripts/train_panda.py stage2  [--root ...] [--steps N] [--until N]
  scripts/train_panda.py export  [--root ...] [--out DIR]           # the fp16 checkpoint
  scripts/train_panda.py answers [--root ...] [--out DIR]           # the learned answer prompt into DIR
  scripts/train_panda.py narration [--root ...] [--demos ...] [--out DIR]  # the learned narration prompt into DIR
  scripts/train_panda.py narrate [--root ...] [--frames N | --every K]  # held-out narration accuracy

Every stage resumes from its run directory (<root>/stage1, <root>/stage2, <root>/answers,
<root>/narration) when rerun.
Hyper-parameters and seeds: oxygen_ros/engine/models/smol_panda/training/hparams.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["stage1", "kvcache", "stage2", "export", "answers", "narration",
                                                "narrate"])
    ap.add_argument("--root", default="out/train/panda", help="run directory (default out/train/panda)")
    ap.add_argument("--demos", default="out/demos", help="demonstration shards (default out/demos)")
    ap.add_argument("--steps", type=int, default=None, help="total steps of the stage (default: hparams.py)")
    ap.add_argument("--until", type=int, default=None,
                    help="stop at this step on the stage's full schedule (resume later to go on)")
    ap.add_argument("--out", default=None,
                    help="export, answers, narration: checkpoint directory (default <root>/checkpoint)")
    ap.add_argument("--checkpoint", default=None,
                    help="kvcache: the prefixes of this finished checkpoint ('shipped': the shipped weights) instead of "
                         "<root>/stage1's, e.g. to retrain only the answers")
    ap.add_argument("--frame-stride", type=int, default=None,
                    help="kvcache: store every k-th frame of each episode (default: hparams.py's Stage2.frame_stride)")
    ap.add_argument("--frames", type=int, default=90, help="narrate: held-out frames (balanced by place)")
    ap.add_argument("--every", type=int, default=0,
                    help="narrate: every k-th frame of every held-out episode instead of a balanced sample")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads of stage1 / kvcache / stage2 / answers / narration (default: hparams.py's, 1: the other core "
                         "stays free; 2 on an otherwise idle 2-core machine)")
    args = ap.parse_args(argv)
    root, demos = Path(args.root), Path(args.demos)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    from oxygen_ros.engine.models.smol_panda.training import hparams as H
    from oxygen_ros.engine.models.smol_panda.training import stage1

    def with_threads(hp):
        if args.threads:
            hp.threads = args.threads
        return hp

    if args.command == "stage1":
        from oxygen_ros.tools import start_frames

        starts = stage1.start_frames_path(root)
        if H.Stage1().start_frames and not starts.exists():     # rendered once, before the stage's first step
            root.mkdir(parents=True, exist_ok=True)
            start_frames.render(starts, H.Stage1().start_frames)
        stage1.train(root, demos, args.steps, hp=with_threads(H.Stage1()), until=args.until)
    elif args.command == "narrate":
        from oxygen_ros.engine.models.smol_panda.training.evaluate import narration_report
        narration_report(root, demos, args.frames, every=args.every)
    elif args.command == "kvcache":
        from oxygen_ros.engine.models.smol_panda.training import kv_cache
        checkpoint = args.checkpoint
        if checkpoint == "shipped":
            from oxygen_ros.engine.models.smol_panda.checkpoint import SHIPPED_DIR
            checkpoint = SHIPPED_DIR
        hp = with_threads(H.Stage2())
        if args.frame_stride:
            hp.frame_stride = args.frame_stride
        kv_cache.build(root, demos, hp=hp, checkpoint=Path(checkpoint) if checkpoint else None)
    elif args.command == "stage2":
        from oxygen_ros.engine.models.smol_panda.training import stage2
        stage2.train(root, args.steps, hp=with_threads(H.Stage2()), until=args.until)
    elif args.command == "export":
        from oxygen_ros.engine.models.smol_panda.training import export
        export.export(root, Path(args.out) if args.out else root / "checkpoint")
    elif args.command == "answers":
        from oxygen_ros.engine.models.smol_panda.training import answers
        answers.train(root, Path(args.out) if args.out else root / "checkpoint", args.steps,
                      hp=with_threads(H.Answers()), until=args.until)
    elif args.command == "narration":
        from oxygen_ros.engine.models.smol_panda.training import narration
        narration.train(root, demos, Path(args.out) if args.out else root / "checkpoint", args.steps,
                        hp=with_threads(H.Narration()), until=args.until)
    return 0


if __name__ == "__main__":
    sys.exit(main())
