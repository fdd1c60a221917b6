"""Stage 2 (knowledge insulation): only the action expert learns, by flow matching on the
prefix K/V stored once per frame (kv_cache.py); the backbone and stage 1's image encoder
stay as they are, so no gradient reaches them and no prefix is recomputed."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from ....layers.blocks import Rope
from ...pi05.expert import ActionExpert
from ..configuration import SMOL_PANDA
from . import hparams as H
from .flow import flow_loss, sample, zero_init
from .kv_cache import KVStore, train_parts
from .run import Run, lr_at


def new_expert(cfg=SMOL_PANDA, seed: int = 2):
    """The engine's pi0.5 expert class, seeded, adaLN-Zero."""
    torch.manual_seed(seed)
    expert = ActionExpert(cfg.expert, cfg.backbone)
    zero_init(expert)
    return expert


def evaluate(expert, rope, store: KVStore, steps: int, n: int = 64, early_frames: int = 10) -> dict:
    """Held-out frames: flow loss at fixed noise / times, and the sampled chunk's error
    (model space, and the first point's) against the demonstration; `val_last_early`: the
    chunk's last point (1 s ahead), largest joint, on the frames of the episodes' first second."""
    def sampled(idx):
        ks, vs, lengths, actions = store.batch(idx)
        noise = torch.randn(actions.shape, generator=torch.Generator().manual_seed(1))
        return ks, vs, lengths, actions, sample(expert, rope, noise, ks, vs, lengths, steps)

    with torch.no_grad():
        ks, vs, lengths, actions, pred = sampled(np.arange(min(n, store.done)))
        fl = flow_loss(expert, rope, actions, ks, vs, lengths, torch.Generator().manual_seed(0)).item()
        err = (pred - actions).abs()
        out = {"val_flow": fl, "val_mae": err.mean().item(), "val_mae_first": err[:, 0].mean().item()}
        t = np.array(store.meta["frame_index"], dtype=np.int64).reshape(-1, 2)[:store.done, 1]
        early = np.flatnonzero(t < early_frames)
        if len(early):
            *_, actions, pred = sampled(early)
            out["val_last_early"] = (pred - actions)[:, -1, :7].abs().amax(-1).mean().item()
    return out


def load_parts(root: Path):
    """The K/V store's training parts and the frames each holds so far (a part being written
    by a `kvcache` run counts what it has flushed)."""
    parts = [KVStore(p) for p in train_parts(root)]
    if policy := [str(p.dir) for p in parts if p.meta.get("policy_frames")]:
        raise ValueError(f"{', '.join(policy)} hold frames of the policy's own episodes (panda_policy_rollout.py "
                         f"--record): their chunks are what the policy did, not demonstrations; store them under "
                         f"another --root (they are for the narration prompt)")
    return parts, np.array([p.done for p in parts], dtype=np.float64)


def frame_weights(parts: list[KVStore], early_frames: int, early_share: float) -> list[np.ndarray]:
    """Each stored frame's chance to be drawn, per part: the frames of the episodes' first
    `early_frames` together get `early_share` of the draws, the others the rest (at the
    stride's 1 in 4 the start, where only the image tells where to go, is a few % of them)."""
    early = [np.array(p.meta["frame_index"], dtype=np.int64).reshape(-1, 2)[:p.done, 1] < early_frames for p in parts]
    n_early = sum(int(e.sum()) for e in early)
    n_rest = sum(len(e) for e in early) - n_early
    share = early_share if n_early and n_rest else float(n_early > 0)
    return [np.where(e, share / max(n_early, 1), (1 - share) / max(n_rest, 1)) for e in early]


def train(root: Path, steps: int | None = None, hp: H.Stage2 | None = None, cfg=SMOL_PANDA,
          until: int | None = None):
    """Run (or resume) stage 2 to `steps` (hparams'), or stop at `until` on that schedule."""
    hp = hp or H.Stage2()
    if steps is not None:
        hp.steps = steps
    torch.set_num_threads(hp.threads)
    root = Path(root)
    parts, sizes = load_parts(root)
    weights = frame_weights(parts, hp.early_frames, hp.early_share)
    val = KVStore(root / "kv" / "val")
    if not sizes.sum():
        raise RuntimeError(f"no stored prefix K/V under {root / 'kv'}: run `train_panda.py kvcache` first")
    run = Run(root / "stage2", {"stage2": vars(hp), "cfg": cfg.name}, hp.steps)
    expert = new_expert(cfg, hp.seed)
    expert.train()
    rope = Rope(cfg.backbone.head_dim, cfg.backbone.rope_theta, 1024)
    opt = torch.optim.AdamW(expert.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
    state = run.resume()
    if state:
        expert.load_state_dict(state["expert"])
        opt.load_state_dict(state["opt"])
        print(f"resumed at step {state['step']}", flush=True)
    print(f"stage 2: {int(sizes.sum())} frames of prefix K/V in {len(parts)} part(s) "
          f"({', '.join(str(int(n)) for n in sizes)}), "
          f"expert {sum(p.numel() for p in expert.parameters()) / 1e6:.1f}M parameters", flush=True)
    step = run.step0
    stop = min(hp.steps, until or hp.steps)

    def fetch(step):
        """Step `step`'s batch (its draw seeded by the step alone, so fetching it ahead changes nothing)."""
        gen = np.random.default_rng([hp.seed, step])
        mass = np.array([w.sum() for w in weights])
        k = gen.choice(len(parts), p=mass / mass.sum())                 # a batch from one part (one max_len)
        part = parts[k]
        return part, part.batch(gen.choice(part.done, hp.batch, p=weights[k] / mass[k]), extra=cfg.expert.horizon)

    # the next batch is read while this step computes (the reads are ~1/3 of a step from disk)
    ahead = ThreadPoolExecutor(1)
    pending = ahead.submit(fetch, step)
    while step < stop:
        tgen = torch.Generator().manual_seed(hp.seed * 1_000_003 + step)
        torch.manual_seed(hp.seed * 1_000_003 + step)          # Beta's sampler draws from the global RNG
        for g in opt.param_groups:
            g["lr"] = lr_at(step, hp.lr, hp.warmup, hp.steps)
        t0 = time.time()
        part, (ks, vs, lengths, actions) = pending.result()
        pending = ahead.submit(fetch, step + 1)
        t_data = time.time() - t0
        loss = flow_loss(expert, rope, actions, ks, vs, lengths, tgen, hp.time_beta, span=part.meta["shape"][3])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(expert.parameters(), hp.grad_clip)
        opt.step()
        step += 1
        run.log({"kind": "step", "step": step, "time": time.time(), "flow": loss.item(), "data_s": t_data,
                 "frames": int(sizes.sum())})
        if step % 10 == 0 or step == run.step0 + 1:
            run.progress(step, {"flow": loss.item()}, f"(data {t_data:.2f} s)")
        if step % hp.checkpoint_every == 0 or step == stop:
            run.save({"step": step, "expert": expert.state_dict(), "opt": opt.state_dict()})
            # a `kvcache` run beside this one may have stored more frames: use them from now on
            fresh, fresh_sizes = load_parts(root)
            if fresh_sizes.sum() > sizes.sum():
                pending.result()                     # drawn from the old parts: draw it again
                parts, sizes = fresh, fresh_sizes
                weights = frame_weights(parts, hp.early_frames, hp.early_share)
                pending = ahead.submit(fetch, step)
                print(f"  now {int(sizes.sum())} frames in {len(parts)} part(s)", flush=True)
        if (step % hp.eval_every == 0 or step == stop) and val.done:
            expert.eval()
            ev = evaluate(expert, rope, val, cfg.expert.denoise_steps, early_frames=hp.early_frames)
            expert.train()
            run.log({"kind": "eval", "step": step, "time": time.time(), **ev})
            print(f"  eval @ {step}: {ev}", flush=True)
        if step % hp.checkpoint_every == 0 or step == stop:        # after the evaluation: the curve has it
            run.plot("stage 2: flow matching of the action expert on stored prefix K/V")
    ahead.shutdown(cancel_futures=True)
    return run
