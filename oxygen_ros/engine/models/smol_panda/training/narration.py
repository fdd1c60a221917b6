"""The learned narration prompt (after stage 2; docs/training.md, "Narration rows"): 16 input
embeddings after "Where is the cube now?" (<|learned_narration|>, learned_prompt.py) that
help the frozen SmolLM2 read the place off the image tokens. Stage 1 taught the encoder to
caption through SmolLM2 alone, on the demonstrations; on the policy's own episodes its
narrations missed most often a cube held in the gripper, lifted well off the table, called
"on the table". The rows learn on stored prefixes of the policy's own episodes
(panda_policy_rollout.py --record; the prefix as the node computes it, so the actions stay
what they were), the three places equally often, each frame's caption written from the sim's
ground truth."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import learned_prompt
from ..configuration import SMOL_PANDA
from . import hparams as H
from . import prompt_tuning
from .data import episode_files
from .kv_cache import KVStore
from .prompt_tuning import Batch


def prompt_for(model) -> str:
    """The narration prompt a model answers as trained: with its learned rows where it has them."""
    return H.NARRATION_PROMPT_LEARNED if learned_prompt.NARRATION in model.learned_blocks else H.NARRATION_PROMPT


def store_places(store: KVStore, demo_dir: Path) -> np.ndarray:
    """The place (H.PLACES index) of each stored frame, read from its episode's shard."""
    files = episode_files(demo_dir)
    cache: dict[int, np.ndarray] = {}
    out = []
    for seed, t in store.meta["frame_index"][:store.done]:
        if seed not in cache:
            if seed not in files:
                raise FileNotFoundError(f"{store.dir} holds frames of seed {seed}, whose shard is not in {demo_dir}")
            with np.load(files[seed]) as shard:        # reads the place array alone
                cache[seed] = shard["place"]
        out.append(int(cache[seed][t]))
    return np.array(out, dtype=np.int64)


class Samples:
    """Stored prefixes with the caption of their place."""

    def __init__(self, store: KVStore, demo_dir: Path):
        self.store, self.places = store, store_places(store, demo_dir)
        self.pools = [np.flatnonzero(self.places == p) for p in range(len(H.PLACES))]

    def draw(self, n: int, rng: np.random.Generator) -> Batch:
        """n frames, the places in turn (a place the store lacks is skipped)."""
        pools = [p for p in self.pools if len(p)]
        idx = np.array([pools[i % len(pools)][int(rng.integers(len(pools[i % len(pools)])))] for i in range(n)])
        return self.batch(idx)

    def batch(self, idx: np.ndarray) -> Batch:
        return Batch(idx, [H.NARRATION_PROMPT_LEARNED] * len(idx), [H.PLACES[p] for p in self.places[idx]])


def train(root: Path, demo_dir: Path, out: Path, steps: int | None = None, hp: H.Narration | None = None,
          cfg=SMOL_PANDA, until: int | None = None) -> Path | None:
    """Learn the rows on <root>'s stored prefixes; write them into checkpoint directory `out`."""
    hp = replace(hp or H.Narration(), **({"steps": steps} if steps else {}))
    samples: dict[Path, Samples] = {}

    def of(store: KVStore) -> Samples:
        if store.dir not in samples:
            samples[store.dir] = Samples(store, demo_dir)
        return samples[store.dir]

    return prompt_tuning.tune(
        root, out, learned_prompt.NARRATION, "narration", hp, H.CAPTIONS,
        draw=lambda store, n, rng: of(store).draw(n, rng),
        validation=lambda val: of(val).batch(np.arange(val.done)), cfg=cfg, until=until)
