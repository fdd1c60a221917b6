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
came with "holding", and a log ending in the bowl was answered "holding" too.) A batch holds
twins: two logs on the same frame under the same question, alike up to their newest notes
(TWIN) or, for a drop, alike but for its gripper notes, so only the notes can tell the answers
apart; uniform draws without twins left a log ending in the bowl answered as a drop.
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


def clean_notes(rng: np.random.Generator, hp: H.Answers) -> list[str]:
    """The places of a memory log made for a progress drawn uniformly: runs of 1..hp.run_notes
    notes per place in the task's order (a third of the held cubes regrasped), the newest
    hp.memory_size kept as the node's log keeps them."""
    key = ("not_yet", "holding", "done", "dropped")[int(rng.integers(4))]
    runs = {"not_yet": ["table"], "holding": ["table", "gripper"], "done": ["table", "gripper", "bowl"],
            "dropped": ["table", "gripper", "table"]}[key]
    if key == "holding" and rng.random() < 1 / 3:
        runs += ["table", "gripper"]
    notes = []
    for i, place in enumerate(runs):
        notes += [place] * int(rng.integers(0 if i == 0 else 1, hp.run_notes + 1))   # later places are seen
    return notes[-hp.memory_size:]


# a log's twin: the same notes up to the last run, which goes on differently (the answer turns on
# the newest notes alone): a drop becomes a placing and back, holding goes on into the bowl, a cube
# not yet touched into the gripper. A drop's other twin is the same log with its gripper notes on
# the table: a cube never picked up (a single gripper note can be all that tells the two apart).
TWIN = {"done": ("bowl", "table"), "dropped": ("table", "bowl"), "holding": (None, "bowl"),
        "not_yet": (None, "gripper")}


def twin_notes(notes: list[str], key: str, rng: np.random.Generator, hp: H.Answers) -> list[str]:
    """`notes` (clean, of progress `key`) with its last run replaced (or a run appended) by TWIN,
    or for half the drops, its gripper notes put back on the table."""
    if key == "dropped" and rng.random() < 0.5:
        return ["table" if p == "gripper" else p for p in notes]
    last, new = TWIN[key]
    base = list(notes)
    if last is not None:
        while base and base[-1] == last:
            base.pop()
    return (base + [new] * int(rng.integers(1, hp.run_notes + 1)))[-hp.memory_size:]


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

    def draw(self, n: int, rng: np.random.Generator, twins: bool = False):
        """(frame indices into the store, memory logs, questions, PROGRESS keys). twins: n / 2
        frames, each with a log and its twin (twin_notes) under the same question, so that only
        the newest notes tell the two answers apart, never the image or the question."""
        frames = n // 2 if twins else n
        idx = np.sort(rng.choice(len(self), frames, replace=False))
        if twins:
            idx = np.repeat(idx, 2)
        logs, questions, keys = [], [], []
        for i in range(len(idx)):
            if twins and i % 2:
                notes = twin_notes(clean, progress(clean), rng, self.hp)
            else:
                clean = clean_notes(rng, self.hp)
                notes = clean
                question = H.QUESTIONS[int(rng.integers(len(H.QUESTIONS)))]
            noisy_notes = [noisy(p, self.hp, rng) for p in notes]
            logs.append([H.CAPTIONS[p] for p in noisy_notes])
            questions.append(question)
            keys.append(progress(noisy_notes))
        return idx, logs, questions, keys


def deciding_tokens(targets: dict[str, list[int]]) -> dict[str, set[int]]:
    """Per answer, the positions where it parts from another answer with the same tokens
    before (e.g. "," against " and" after "I picked up the cube"): the tokens that say which
    progress it is; every other token follows from them."""
    out = {key: set() for key in targets}
    for key, ids in targets.items():
        for other in targets.values():
            j = next((j for j, (a, b) in enumerate(zip(ids, other)) if a != b), None)
            if j is not None:
                out[key].add(j)
    return out


def answer_loss(model, tok, store: KVStore, idx, logs, questions, keys, decision_weight: float = 1.0):
    """Cross-entropy of the target answers (and <|im_end|>) after each stored prefix and its
    filled answer prompt, with autograd to the learned rows, the deciding tokens weighted by
    decision_weight; and which answers are right at every token (greedy, teacher-forced)."""
    eos = next(iter(tok.eos_ids))
    sentences = {key: tok.encode(text) + [eos] for key, text in H.PROGRESS.items()}
    deciding = deciding_tokens(sentences)
    rows, starts, weights = [], [], []
    for memory, question, key in zip(logs, questions, keys):
        prompt = model.request_ids(tok, fill_answer(H.ANSWER_PROMPT, memory, question))
        target = sentences[key]
        starts.append((len(prompt) - 1, target))
        rows.append(prompt + target[:-1])
        weights += [decision_weight if j in deciding[key] else 1.0 for j in range(len(target))]
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
    targets, owner, weights = torch.tensor(targets), torch.tensor(owner), torch.tensor(weights)
    loss = (F.cross_entropy(logits, targets, reduction="none") * weights).sum() / weights.sum()
    wrong = torch.zeros(b).index_add_(0, owner, (logits.argmax(-1) != targets).float())
    return loss, (wrong == 0).tolist()


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
        loss, right = answer_loss(model, tok, part.store, *part.draw(hp.batch, rng, twins=hp.twins),
                                  decision_weight=hp.decision_weight)
        right = sum(right)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        record = {"kind": "step", "step": step, "time": time.time(), "loss": loss.item(),
                  "train_acc": right / hp.batch, "sec": time.time() - t0}
        if step % hp.eval_every == 0 or step == steps:
            with torch.no_grad():
                v_loss, v_right = answer_loss(model, tok, val.store, *val_batch)
            by_key = {k: f"{sum(r for r, kk in zip(v_right, val_batch[3]) if kk == k)}/{val_batch[3].count(k)}"
                      for k in H.PROGRESS}
            run.log({"kind": "eval", "step": step, "time": time.time(), "val_loss": v_loss.item(),
                     "val_acc": sum(v_right) / len(v_right), "val_right": by_key})
            print(f"  held out: loss {v_loss.item():.4f}, {sum(v_right)}/{len(v_right)} answers right {by_key}",
                  flush=True)
        run.log(record)
        run.progress(step, {"loss": record["loss"]}, f"right {right}/{hp.batch}")
        if step % hp.checkpoint_every == 0 or step == steps:
            run.save({"step": step, "rows": rows.detach().clone(), "opt": opt.state_dict()})
            run.plot("answers: the learned prompt's loss (SmolLM2 frozen)")
    path = learned_prompt.write(out, rows)
    print(f"wrote {path} ({hp.rows} rows, fp16)", flush=True)
    return path
