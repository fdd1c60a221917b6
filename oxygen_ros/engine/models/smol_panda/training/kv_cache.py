"""Stage 2's inputs, computed once: each chosen frame's prefix K/V from the frozen backbone
with stage 1's image encoder (knowledge insulation: nothing upstream of the expert changes
in stage 2, so the prefix of a frame never changes either).

<root>/kv/<part>/: kv.f16 (memory map, [N, 2, depth, kv_heads, max_len, head_dim], K then V,
rotary already applied as the engine's pool holds them), lengths.npy (valid prefix tokens),
actions.npy ([N, H, D] in model space: the checkpoint's PolicyIO.model_actions), meta.json.
Resumable: meta.json counts the frames written and names its frames by (seed, t). The
training frames come in parts (train_0, train_1, ...): a rerun stores the episodes recorded
since the last part in a new one, and stage 2 samples from all of them."""
from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from ..configuration import SMOL_PANDA
from ..loading import load_smol_panda
from . import hparams as H
from .common import ensure_io, frame_inputs, training_model
from .data import Demos, policy_io


def choose_frames(demos: Demos, stride: int, max_frames: int, seed: int) -> np.ndarray:
    """Every stride-th frame of each episode (offset by its seed, so every phase is covered),
    a seeded random subset of at most max_frames, in storage order."""
    picks = [i for i, (e, t) in enumerate(demos.frames) if (t + demos.episodes[e].seed) % stride == 0]
    picks = np.array(picks, dtype=np.int64)
    if len(picks) > max_frames:
        picks = np.sort(np.random.default_rng(seed).choice(picks, max_frames, replace=False))
    return picks


def stage1_model(root: Path, cfg=SMOL_PANDA, checkpoint: Path | None = None):
    """(model, tokenizer, stage 1's step): SmolLM2 with <root>'s stage-1 image encoder, or with
    a finished checkpoint's (the shipped weights: the answers stage retrained on its own)."""
    if checkpoint is not None:
        model, tok = load_smol_panda(cfg, checkpoint=checkpoint)
        return model, tok, f"the checkpoint {checkpoint}"
    model, tok = training_model(cfg)
    state = torch.load(Path(root) / "stage1" / "state.pt", map_location="cpu", weights_only=False)
    model.vision.load_state_dict(state["vision"])
    return model.eval(), tok, state["step"]


class KVStore:
    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.meta = json.loads((self.dir / "meta.json").read_text())
        n, shape = self.meta["frames"], tuple(self.meta["shape"])
        self.kv = np.memmap(self.dir / "kv.f16", dtype=np.float16, mode="r", shape=(n, *shape))
        self.lengths = np.load(self.dir / "lengths.npy")
        self.actions = np.load(self.dir / "actions.npy")
        self.done = self.meta["done"]

    def read(self, idx: np.ndarray) -> np.ndarray:
        """The frames' raw fp16 K/V, read in file order with plain reads: they release the GIL
        (a memory map's page faults do not), so stage 2 can fetch the next batch beside a step."""
        out = np.empty((len(idx), *self.kv.shape[1:]), dtype=np.float16)
        size = out[0].nbytes
        with open(self.dir / "kv.f16", "rb", buffering=0) as f:
            for j in np.argsort(idx, kind="stable"):
                f.seek(int(idx[j]) * size)
                if f.readinto(memoryview(out[j]).cast("B")) != size:
                    raise OSError(f"{self.dir / 'kv.f16'}: frame {idx[j]} is cut short")
        return out

    def batch(self, idx: np.ndarray, extra: int = 0):
        """(K, V) as float32 [depth][B, kv_heads, max_len + extra, head_dim] lists (one tensor a
        layer; the `extra` positions zero: room for the action tokens' K/V), lengths [B],
        actions [B, H, D]."""
        idx = np.asarray(idx)
        raw = torch.from_numpy(self.read(idx))
        b, _, depth, kvh, span, d = raw.shape
        ks, vs = [], []
        for i in range(depth):
            for out, j in ((ks, 0), (vs, 1)):
                t = torch.empty(b, kvh, span + extra, d)
                t[:, :, :span].copy_(raw[:, j, i])
                t[:, :, span:].zero_()
                out.append(t)
        return ks, vs, torch.from_numpy(self.lengths[idx].astype(np.int64)), \
            torch.from_numpy(self.actions[idx]).float()


def build_split(root: Path, demos: Demos, frames: np.ndarray | None, out: Path, model, tok, io, batch: int = 8):
    """Store the prefix K/V of `frames` (indices into demos) in `out`; frames=None resumes
    the selection its meta.json names."""
    cfg = model.cfg
    bb = cfg.backbone
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        where = {(int(demos.episodes[e].seed), int(t)): i for i, (e, t) in enumerate(demos.frames)}
        frames = np.array([where[tuple(st)] for st in meta["frame_index"]], dtype=np.int64)
        shape = tuple(meta["shape"])
    else:
        prompts = [io.prompt_tokens(H.INSTRUCTION, demos.episodes[demos.frames[i][0]].state[demos.frames[i][1]])
                   for i in frames]
        images = len(H.CAMERAS) * cfg.vision.tokens_per_image
        shape = (2, bb.depth, bb.num_kv_heads, images + max(len(p) for p in prompts), bb.head_dim)
        meta = {"frames": len(frames), "shape": list(shape), "done": 0, "seconds": 0.0,
                "frame_index": [[int(demos.episodes[demos.frames[i][0]].seed), int(demos.frames[i][1])] for i in frames],
                "policy_frames": sum(demos.episodes[demos.frames[i][0]].source == "policy" for i in frames)}
        np.save(out / "lengths.npy", np.array([images + len(p) for p in prompts], np.int16))
        acts = []
        for i in frames:
            ep = demos.episodes[demos.frames[i][0]]
            t = demos.frames[i][1]
            acts.append(io.model_actions(ep.actions[t], ep.state[t]))
        np.save(out / "actions.npy", np.stack(acts).astype(np.float32))
        np.memmap(out / "kv.f16", dtype=np.float16, mode="w+", shape=(len(frames), *shape)).flush()
        meta_path.write_text(json.dumps(meta))
    if meta["done"] >= meta["frames"]:
        return
    images = len(H.CAMERAS) * cfg.vision.tokens_per_image
    kv = np.memmap(out / "kv.f16", dtype=np.float16, mode="r+", shape=(len(frames), *shape))
    t0, start = time.time(), meta["done"]
    began = t0
    for lo in range(start, len(frames), batch):
        idx = frames[lo:lo + batch]
        with torch.inference_mode():
            pix, pr, _ = frame_inputs(demos, idx, io)
            img = model.vision(pix).reshape(len(idx), images, -1)
            length = max(len(p) for p in pr)
            ids = torch.tensor([p + [0] * (length - len(p)) for p in pr])
            x = torch.cat([img, model.backbone.embed(ids)], dim=1)
            t = x.shape[1]
            pool = SimpleNamespace(k=[torch.zeros(len(idx), bb.num_kv_heads, t, bb.head_dim) for _ in range(bb.depth)],
                                   v=[torch.zeros(len(idx), bb.num_kv_heads, t, bb.head_dim) for _ in range(bb.depth)])
            # causal and right-padded: each frame's K/V are what its own prefill writes
            model.backbone(x, torch.arange(t)[None].expand(len(idx), t), pool, slice(0, len(idx)), 0, t,
                           torch.ones(t, t, dtype=torch.bool).tril()[None, None])
            block = torch.stack([torch.stack(pool.k, 1), torch.stack(pool.v, 1)], 1)   # [B, 2, depth, kvh, t, d]
        kv[lo:lo + len(idx), :, :, :, :t] = block.half().numpy()
        meta["done"] = lo + len(idx)
        if (lo // batch) % 25 == 0 or meta["done"] == len(frames):
            kv.flush()
            meta["seconds"] += time.time() - t0
            t0 = time.time()
            meta_path.write_text(json.dumps(meta))
            print(f"kv {out.name}: {meta['done']}/{len(frames)} frames  "
                  f"{(meta['done'] - start) / max(time.time() - began, 1e-9):.2f} frames/s", flush=True)
    kv.flush()
    meta_path.write_text(json.dumps(meta))


def train_parts(root: Path) -> list[Path]:
    return sorted(p for p in (Path(root) / "kv").glob("train_*") if (p / "meta.json").exists())


def build(root: Path, demo_dir: Path, hp: H.Stage2 | None = None, cfg=SMOL_PANDA, checkpoint: Path | None = None):
    """Store the prefix K/V of <demo_dir>'s frames under <root>/kv; with `checkpoint`, the
    prefixes (image encoder, statistics) are that checkpoint's, not <root>'s stage 1."""
    hp = hp or H.Stage2()
    torch.set_num_threads(hp.threads)
    model, tok, step = stage1_model(root, cfg, checkpoint)
    train_set, held = Demos(demo_dir, "train"), Demos(demo_dir, "held_out")
    io = policy_io(checkpoint, tok, cfg) if checkpoint is not None else ensure_io(root, train_set, tok, cfg)
    source = step if checkpoint is not None else f"stage 1 step {step}"
    print(f"kv cache from {source}: {len(train_set.episodes)} training episodes, "
          f"{len(held.episodes)} held out", flush=True)
    kv_root = Path(root) / "kv"
    val_dir = kv_root / "val"
    build_split(root, held, None if (val_dir / "meta.json").exists() else
                choose_frames(held, hp.frame_stride, hp.val_frames, hp.seed), val_dir, model, tok, io)
    parts = train_parts(root)
    for part in parts:                         # finish a part a stopped run left
        build_split(root, train_set, None, part, model, tok, io)
    picks = frames_to_add(train_set, parts, hp)
    if not len(picks):
        stored = sum(json.loads((p / "meta.json").read_text())["frames"] for p in parts)
        print(f"kv: nothing new to store ({stored} frames in {len(parts)} part(s))", flush=True)
        return
    print(f"kv: part train_{len(parts)}: {len(picks)} frames of "
          f"{len({int(train_set.frames[i][0]) for i in picks})} episodes", flush=True)
    build_split(root, train_set, picks, kv_root / f"train_{len(parts)}", model, tok, io)


def frames_to_add(train_set: Demos, parts: list[Path], hp: H.Stage2) -> np.ndarray:
    """Indices into train_set of the frames no part holds yet: every stride-th frame of the
    episodes no part holds (up to max_frames in all), and every frame of the first
    `early_frames` of every episode (beyond the cap: at 1 in 4 the one state every episode
    starts from, where the image alone decides the move, would be under 1% of the frames), and
    every frame a recording confined its offsets to (Episode.confined: the gripper led back to
    the cube, the states the policy's grasps fail from, also beyond the cap)."""
    stored = {tuple(st) for p in parts for st in json.loads((p / "meta.json").read_text())["frame_index"]}
    stored_seeds = {seed for seed, _ in stored}
    seed_of = np.array([ep.seed for ep in train_set.episodes], dtype=np.int64)
    fresh = np.flatnonzero(~np.isin(seed_of[train_set.frames[:, 0]], list(stored_seeds)))
    picks: list[int] = []
    room = hp.max_frames - len(stored)
    if len(fresh) and room > 0:
        kept = sorted({int(e) for e in train_set.frames[fresh, 0]})
        new = Demos.of([train_set.episodes[e] for e in kept])    # the episodes no part holds yet
        chosen = choose_frames(new, hp.frame_stride, room, hp.seed + len(parts))
        picks = [int(fresh[i]) for i in chosen]   # new's frames are train_set's fresh frames, in order
    early = [i for i, (e, t) in enumerate(train_set.frames)
             if t < hp.early_frames and (int(seed_of[e]), int(t)) not in stored]
    confined = [i for i, (e, t) in enumerate(train_set.frames)
                if train_set.episodes[e].confined is not None and train_set.episodes[e].confined[t]
                and (int(seed_of[e]), int(t)) not in stored]
    return np.array(sorted(set(picks) | set(early) | set(confined)), dtype=np.int64)
