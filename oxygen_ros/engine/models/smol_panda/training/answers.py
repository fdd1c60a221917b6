"""The learned answer prompt (after stage 2; docs/training.md, Answers): what "what have you
done?" is answered with, learned as 16 input embeddings (prompt tuning) while SmolLM2, the
image encoder and the expert stay frozen. The prefixes, hence the actions and narrations of
the shipped weights, are untouched; the rows stand where the answer template writes
<|learned_prompt|> (learned_prompt.py).

Each sample is a stored frame (stage 2's prefix K/V: kv_cache.py) with a memory log made
for one of the four progress states drawn uniformly (notes of the cube's place as the
narration captions say them, a few named wrongly), a question (hparams.QUESTIONS) and the
target sentence the log calls for (progress.py). The log is drawn apart from the frame: the
answer repeats what the notes say, whatever the image shows. (Logs that follow each frame's
episode taught the image instead: with notes a few seconds behind, a cube at the bowl mostly
came with "holding", and a log ending in the bowl was answered "holding" too.)
"""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

from .. import learned_prompt
from ..configuration import SMOL_PANDA
from ....text.prompts import fill_answer
from . import hparams as H
from .common import training_model
from .kv_cache import KVStore, train_parts
from .progress import progress
from .run import Run, lr_at


def random_notes(hp: H.Answers, rng: np.random.Generator) -> list[str]:
    """A memory log made for a progress drawn uniformly: runs of notes per place in the task's
    order (a third of the held cubes regrasped), the latest memory_size, a few named wrongly."""
    key = ("not_yet", "holding", "done", "dropped")[int(rng.integers(4))]
    runs = {"not_yet": ["table"], "holding": ["table", "gripper"], "done": ["table", "gripper", "bowl"],
            "dropped": ["table", "gripper", "table"]}[key]
    if key == "holding" and rng.random() < 1 / 3:
        runs += ["table", "gripper"]
    notes = []
    for i, place in enumerate(runs):
        notes += [place] * int(rng.integers(0 if i == 0 else 1, 4))     # the places after the first are seen
    return [noisy(p, hp, rng) for p in notes[-hp.memory_size:]]


def noisy(place: str, hp: H.Answers, rng: np.random.Generator) -> str:
    if rng.random() < hp.note_noise:
        return H.PLACES[(H.PLACES.index(place) + int(rng.integers(1, 3))) % 3]
    return place


class Samples:
    """Stored prefixes with memory logs, questions and target answers."""

    def __init__(self, store: KVStore, hp: H.Answers):
        self.store, self.hp = store, hp

    def __len__(self) -> int:
        return self.store.done

    def draw(self, n: int, rng: np.random.Generator):
        """(frame indices into the store, memory logs, questions, PROGRESS keys)."""
        idx = np.sort(rng.choice(len(self), n, replace=False))
        logs, questions, keys = [], [], []
        for _ in idx:
            notes = random_notes(self.hp, rng)
            logs.append([H.CAPTIONS[p] for p in notes])
            questions.append(H.QUESTIONS[int(rng.integers(len(H.QUESTIONS)))])
            keys.append(progress(notes))
        return idx, logs, questions, keys


def answer_loss(model, tok, store: KVStore, idx, logs, questions, keys):
    """Cross-entropy of the target answers (and <|im_end|>) after each stored prefix and its
    filled answer prompt, with autograd to the learned rows; and how many answers are
    right at every token (greedy, teacher-forced)."""
    eos = next(iter(tok.eos_ids))
    rows, starts = [], []
    for memory, question, key in zip(logs, questions, keys):
        prompt = model.request_ids(tok, fill_answer(H.ANSWER_PROMPT, memory, question))
        target = tok.encode(H.PROGRESS[key]) + [eos]
        starts.append((len(prompt) - 1, target))
        rows.append(prompt + target[:-1])
    t = max(len(r) for r in rows)
    ids = torch.tensor([r + [eos] * (t - len(r)) for r in rows])
    ks, vs, lengths, _ = store.batch(idx, extra=t)
    span, b = ks[0].shape[2] - t, len(idx)
    # each row's prompt follows its own prefix (padded to the store's span: masked out)
    positions = lengths[:, None] + torch.arange(t)[None]
    mask = torch.zeros(b, 1, t, span + t, dtype=torch.bool)
    mask[:, 0, :, :span] = (torch.arange(span)[None] < lengths[:, None])[:, None, :]
    mask[:, 0, :, span:] = torch.ones(t, t, dtype=torch.bool).tril()
    pool = SimpleNamespace(k=ks, v=vs)
    hidden = model.backbone(model.embed_request(ids), positions, pool, slice(0, b), span, span + t, mask)
    picked, targets, owner = [], [], []
    for r, (first, target) in enumerate(starts):
        picked.append(hidden[r, first:first + len(target)])
        targets += target
        owner += [r] * len(target)
    logits = model.backbone.logits(torch.cat(picked))
    targets, owner = torch.tensor(targets), torch.tensor(owner)
    loss = F.cross_entropy(logits, targets)
    wrong = torch.zeros(b).index_add_(0, owner, (logits.argmax(-1) != targets).float())
    return loss, int((wrong == 0).sum())


def train(root: Path, out: Path, steps: int | None = None, hp: H.Answers | None = None,
          cfg=SMOL_PANDA) -> Path:
    """Learn the rows on <root>'s stored prefixes; write them into checkpoint directory `out`."""
    hp = hp or H.Answers()
    steps = steps or hp.steps
    torch.set_num_threads(hp.threads)
    run = Run(Path(root) / "answers", {"answers": vars(hp), "cfg": cfg.name}, steps)
    parts = [KVStore(p) for p in train_parts(root)]
    if not parts:
        raise RuntimeError(f"no stored prefix K/V under {Path(root) / 'kv'}: run `train_panda.py kvcache` first")
    train_set = [Samples(s, hp) for s in parts]
    val = Samples(KVStore(Path(root) / "kv" / "val"), hp)
    model, tok = training_model(cfg)
    model.requires_grad_(False)                 # only the rows learn
    init = model.backbone.embed(torch.tensor([tok.encode(hp.init_text)]))[0]
    rows = init[torch.arange(hp.rows) % init.shape[0]].clone().requires_grad_(True)
    opt = torch.optim.AdamW([rows], lr=hp.lr, weight_decay=0.0)
    state = run.resume()
    if state:
        rows.data.copy_(state["rows"])
        opt.load_state_dict(state["opt"])
    model.learned_prompt = rows               # the buffer embed_request reads, here with autograd
    rng = np.random.default_rng([hp.seed, run.step0])
    val_batch = val.draw(min(hp.eval_samples, len(val)), np.random.default_rng(hp.seed + 1000))
    print(f"answers: {sum(map(len, train_set))} training frames, {len(val)} held out; "
          f"from step {run.step0}", flush=True)
    step = run.step0
    while step < steps:
        t0 = time.time()
        part = train_set[int(rng.integers(len(train_set)))]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, hp.lr, hp.warmup, steps)
        loss, right = answer_loss(model, tok, part.store, *part.draw(hp.batch, rng))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        record = {"kind": "step", "step": step, "time": time.time(), "loss": loss.item(),
                  "train_acc": right / hp.batch, "sec": time.time() - t0}
        if step % hp.eval_every == 0 or step == steps:
            with torch.no_grad():
                v_loss, v_right = answer_loss(model, tok, val.store, *val_batch)
            run.log({"kind": "eval", "step": step, "time": time.time(), "val_loss": v_loss.item(),
                     "val_acc": v_right / len(val_batch[0])})
            print(f"  held out: loss {v_loss.item():.4f}, {v_right}/{len(val_batch[0])} answers right", flush=True)
        run.log(record)
        run.progress(step, {"loss": record["loss"]}, f"right {right}/{hp.batch}")
        if step % hp.checkpoint_every == 0 or step == steps:
            run.save({"step": step, "rows": rows.detach().clone(), "opt": opt.state_dict()})
            run.plot("answers: the learned prompt's loss (SmolLM2 frozen)")
    path = learned_prompt.write(out, rows)
    print(f"wrote {path} ({hp.rows} rows, fp16)", flush=True)
    return path
