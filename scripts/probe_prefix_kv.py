#!/usr/bin/env python3
"""Is the cube's place in the prefix the action expert reads? A linear probe (ridge
regression) from the stored prefix K/V of smol-panda's stage 2 (kv_cache.py) at the image
tokens of one backbone layer to the sim's ground truth: the cube's x, y on the table and
the cube relative to the gripper, and the cube's turn (sin and cos of 4x its yaw: the wrist
turns to it). Fitted on a training part, scored on the held-out part.
A small error here and a policy that misses the cube say the expert does not use what the
prefix holds; a large one says the image encoder or the backbone lose it.

  .venv/bin/python scripts/probe_prefix_kv.py [--root out/train/panda] [--demos out/demos]
      [--part train_1] [--frames 1500] [--layers 0,15,29] [--ridge 100]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

IMAGE_TOKENS = 32          # smol-panda's prefix starts with 2 cameras x 16 image tokens


def store(directory: Path, frames: int):
    """The part's K/V memory map and the (seed, t) of its first `frames` stored frames."""
    from oxygen_ros.engine.models.smol_panda.training.kv_cache import KVStore

    s = KVStore(directory)
    return s.kv, s.meta["frame_index"][: min(frames, s.done)]


def truth(demos: Path, index) -> np.ndarray:
    """[N, 7]: cube x, y (m, world), cube - gripper x, y, z (m), sin and cos of 4x the cube's yaw."""
    from oxygen_ros.engine.models.smol_panda.training.data import yaw

    episodes, rows = {}, []
    for seed, t in index:
        if seed not in episodes:
            d = np.load(demos / f"episode_{seed}.npz")
            episodes[seed] = (d["cube_pose"][:, :3], d["gripper_pose"][:, :3], 4 * yaw(d["cube_pose"][:, 3:]))
        cube, grip, turn = episodes[seed]
        rows.append(np.concatenate([cube[t, :2], cube[t] - grip[t], [np.sin(turn[t]), np.cos(turn[t])]]))
    return np.array(rows)


def features(kv, n: int, layer: int) -> np.ndarray:
    """K and V of the image tokens at `layer`, flattened: [n, 2 x kv_heads x 32 x head_dim]."""
    parts = [np.asarray(kv[i:min(n, i + 100), :, layer, :, :IMAGE_TOKENS, :], dtype=np.float32)
             for i in range(0, n, 100)]
    x = np.concatenate(parts)
    return x.reshape(len(x), -1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="out/train/panda")
    ap.add_argument("--demos", default="out/demos")
    ap.add_argument("--part", default="train_1", help="training part to fit on (kv/<part>)")
    ap.add_argument("--frames", type=int, default=1500)
    ap.add_argument("--layers", default="0,15,29")
    ap.add_argument("--ridge", type=float, default=100.0)
    args = ap.parse_args()
    kv_root = Path(args.root) / "kv"
    tr_kv, tr_idx = store(kv_root / args.part, args.frames)
    va_kv, va_idx = store(kv_root / "val", args.frames)
    y_tr, y_va = truth(Path(args.demos), tr_idx), truth(Path(args.demos), va_idx)
    spread = np.abs(y_va - y_va.mean(0)).mean(0)
    print(f"fit on {len(tr_idx)} frames of {args.part}, scored on {len(va_idx)} held-out frames; "
          f"spread of the truth (mean abs deviation): cube x, y and cube - gripper (cm) "
          f"{np.round(spread[:5] * 100, 1)}, sin/cos 4 yaw {np.round(spread[5:], 2)}")
    for layer in (int(x) for x in args.layers.split(",")):
        x_tr, x_va = features(tr_kv, len(tr_idx), layer), features(va_kv, len(va_idx), layer)
        mu, sd = x_tr.mean(0), x_tr.std(0) + 1e-3
        x_tr, x_va = (x_tr - mu) / sd, (x_va - mu) / sd
        # dual form: far fewer frames than features
        alpha = np.linalg.solve(x_tr @ x_tr.T + args.ridge * np.eye(len(x_tr)), y_tr - y_tr.mean(0))
        err = np.abs(x_va @ (x_tr.T @ alpha) + y_tr.mean(0) - y_va).mean(0)
        cm = err[:5] * 100
        print(f"layer {layer:2d}: held-out mean abs error (cm): cube x {cm[0]:.1f}, y {cm[1]:.1f}; "
              f"cube - gripper x {cm[2]:.1f}, y {cm[3]:.1f}, z {cm[4]:.1f}; "
              f"sin 4 yaw {err[5]:.2f}, cos 4 yaw {err[6]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
