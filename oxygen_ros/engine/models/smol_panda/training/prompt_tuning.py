"""Prompt tuning on stored prefixes, shared by the learned answer (answers.py) and narration
(narration.py) prompts: SmolLM2, the image encoder and the expert stay frozen, only one block
of learned rows (learned_prompt.py) learns, from the cross-entropy of target sentences after
stage 2's stored prefix K/V (kv_cache.py: the prefix as the node computes it)."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from .. import learned_prompt
from ..configuration import SMOL_PANDA
from .common import training_model
from .kv_cache import KVStore, train_parts
from .run import Run, lr_at


class Batch(NamedTuple):
    idx: np.ndarray                 # frames of the store
    prompts: list[str]              # request prompts after each frame's prefix
    keys: list[str]                 # which target sentence each row says


def deciding_tokens(targets: dict[str, list[int]]) -> dict[str, set[int]]:
    """Per target, the positions where it parts from another target with the same tokens
    before (e.g. "," against " and" after "I picked up the cube"): the tokens that say which
    one it is; every other token follows from them."""
    out = {key: set() for key in targets}
    for key, ids in targets.items():
        for other in targets.values():
            j = next((j for j, (a, b) in enumerate(zip(ids, other)) if a != b), None)
            if j is not None:
                out[key].add(j)
    return out


def sentence_ids(tok, sentences: dict[str, str]) -> dict[str, list[int]]:
    """Each target sentence's tokens and <|im_end|>."""
    eos = next(iter(tok.eos_ids))
    return {key: tok.encode(text) + [eos] for key, text in sentences.items()}


def request_loss(model, tok, store: KVStore, batch: Batch, targets: dict[str, list[int]],
                 decision_weight: float = 1.0):
    """Cross-entropy of each row's target (teacher-forced) after its stored prefix and prompt,
    with autograd to the learned rows, the deciding tokens weighted by decision_weight; and
    which rows are right at every token (greedy)."""
    eos = next(iter(tok.eos_ids))
    deciding = deciding_tokens(targets)
    rows, starts, weights = [], [], []
    for prompt_text, key in zip(batch.prompts, batch.keys):
        prompt = model.request_ids(tok, prompt_text)
        target = targets[key]
        starts.append((len(prompt) - 1, target))
        rows.append(prompt + target[:-1])
        weights += [decision_weight if j in deciding[key] else 1.0 for j in range(len(target))]
    t = max(len(r) for r in rows)
    ids = torch.tensor([r + [eos] * (t - len(r)) for r in rows])
    ks, vs, lengths, _ = store.batch(batch.idx, extra=t)
    span, b = ks[0].shape[2] - t, len(batch.idx)
    # each row's prompt follows its own prefix (padded to the store's span: masked out)
    positions = lengths[:, None] + torch.arange(t)[None]
    mask = torch.zeros(b, 1, t, span + t, dtype=torch.bool)
    mask[:, 0, :, :span] = (torch.arange(span)[None] < lengths[:, None])[:, None, :]
    mask[:, 0, :, span:] = torch.ones(t, t, dtype=torch.bool).tril()
    pool = SimpleNamespace(k=ks, v=vs)
    hidden = model.backbone(model.embed_request(ids), positions, pool, slice(0, b), span, span + t, mask)
    picked, flat, owner = [], [], []
    for r, (first, target) in enumerate(starts):
        picked.append(hidden[r, first:first + len(target)])
        flat += target
        owner += [r] * len(target)
    logits = model.backbone.logits(torch.cat(picked))
    flat, owner, weights = torch.tensor(flat), torch.tensor(owner), torch.tensor(weights)
    loss = (F.cross_entropy(logits, flat, reduction="none") * weights).sum() / weights.sum()
    wrong = torch.zeros(b).index_add_(0, owner, (logits.argmax(-1) != flat).float())
    return loss, (wrong == 0).tolist()


def right_by_key(batch: Batch, right: list[bool], keys) -> dict[str, str]:
    return {k: f"{sum(r for r, kk in zip(right, batch.keys) if kk == k)}/{batch.keys.count(k)}" for k in keys}


def tune(root: Path, out: Path, name: str, run_name: str, hp, sentences: dict[str, str],
         draw: Callable[[KVStore, int, np.random.Generator], Batch],
         validation: Callable[[KVStore], Batch], cfg=SMOL_PANDA, until: int | None = None) -> Path | None:
    """Learn block `name` (hp.rows rows, from hp.init_text's embeddings) on <root>'s stored
    prefixes with batches `draw` makes, judged every hp.eval_every steps on `validation`'s
    batch of the held-out store; write the rows into checkpoint directory `out`. Resumable
    from <root>/<run_name>; `until` stops at that step of the schedule (nothing written)."""
    torch.set_num_threads(hp.threads)
    run = Run(Path(root) / run_name, {run_name: vars(hp), "cfg": cfg.name}, hp.steps)
    stores = [KVStore(p) for p in train_parts(root)]
    if not stores:
        raise RuntimeError(f"no stored prefix K/V under {Path(root) / 'kv'}: run `train_panda.py kvcache` first")
    val = KVStore(Path(root) / "kv" / "val")
    model, tok = training_model(cfg)
    model.requires_grad_(False)                 # only the rows learn
    targets = sentence_ids(tok, sentences)
    init = model.backbone.embed(torch.tensor([tok.encode(hp.init_text)]))[0]
    rows = init[torch.arange(hp.rows) % init.shape[0]].clone().requires_grad_(True)
    opt = torch.optim.AdamW([rows], lr=hp.lr, weight_decay=0.0)
    state = run.resume()
    if state:
        rows.data.copy_(state["rows"])
        opt.load_state_dict(state["opt"])
    model.set_learned_prompt(rows, name)        # a lone block: embed_request reads this leaf, with autograd
    rng = np.random.default_rng([hp.seed, 0])
    if state and "rng" in state:                # the draws go on where they stopped: a resumed run is one run
        rng.bit_generator.state = state["rng"]
    val_batch = validation(val)
    print(f"{name}: {sum(s.done for s in stores)} training frames, {val.done} held out; "
          f"from step {run.step0}", flush=True)
    step = run.step0
    stop = min(hp.steps, until) if until else hp.steps
    while step < stop:
        t0 = time.time()
        store = stores[int(rng.integers(len(stores)))]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, hp.lr, hp.warmup, hp.steps)
        loss, right = request_loss(model, tok, store, draw(store, hp.batch, rng), targets, hp.decision_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        record = {"kind": "step", "step": step, "time": time.time(), "loss": loss.item(),
                  "train_acc": sum(right) / len(right), "sec": time.time() - t0}
        if step % hp.eval_every == 0 or step == hp.steps:
            with torch.no_grad():
                v_loss, v_right = request_loss(model, tok, val, val_batch, targets)
            by_key = right_by_key(val_batch, v_right, sentences)
            run.log({"kind": "eval", "step": step, "time": time.time(), "val_loss": v_loss.item(),
                     "val_acc": sum(v_right) / len(v_right), "val_right": by_key})
            print(f"  held out: loss {v_loss.item():.4f}, {sum(v_right)}/{len(v_right)} right {by_key}", flush=True)
        run.log(record)
        run.progress(step, {"loss": record["loss"]}, f"right {sum(right)}/{len(right)}")
        if step % hp.checkpoint_every == 0 or step in (hp.steps, stop):
            run.save({"step": step, "rows": rows.detach().clone(), "opt": opt.state_dict(),
                      "rng": rng.bit_generator.state})
            run.plot(f"{run_name}: the learned rows' loss (SmolLM2 frozen)")
    if step < hp.steps:
        print(f"{run_name}: stopped at step {step} of {hp.steps} (--until); rerun to go on", flush=True)
        return None
    path = learned_prompt.write(out, rows, name)
    print(f"wrote {name} into {path} ({hp.rows} rows, fp16)", flush=True)
    return path
