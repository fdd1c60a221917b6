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

from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import learned_prompt
from ..configuration import SMOL_PANDA
from ....text.prompts import fill_answer
from . import hparams as H
from . import prompt_tuning
from .kv_cache import KVStore
from .progress import progress
from .prompt_tuning import Batch


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


def to_batch(drawn) -> Batch:
    """Samples.draw's (frames, logs, questions, keys) as prompts filled with the answer template."""
    idx, logs, questions, keys = drawn
    return Batch(idx, [fill_answer(H.ANSWER_PROMPT, memory, q) for memory, q in zip(logs, questions)], keys)


def train(root: Path, out: Path, steps: int | None = None, hp: H.Answers | None = None,
          cfg=SMOL_PANDA, until: int | None = None) -> Path | None:
    """Learn the rows on <root>'s stored prefixes; write them into checkpoint directory `out`."""
    hp = replace(hp or H.Answers(), **({"steps": steps} if steps else {}))
    return prompt_tuning.tune(
        root, out, learned_prompt.ANSWER, "answers", hp, H.PROGRESS,
        draw=lambda store, n, rng: to_batch(Samples(store, hp).draw(n, rng, twins=hp.twins)),
        validation=lambda val: to_batch(Samples(val, hp).draw(min(hp.eval_samples, val.done),
                                                              np.random.default_rng(hp.seed + 1000))),
        cfg=cfg, until=until)
