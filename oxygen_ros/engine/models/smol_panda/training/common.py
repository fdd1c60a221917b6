"""What both stages share: the model for training, the statistics / policy-I/O directory,
and the frozen backbone run with gradients to its inputs."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from ..checkpoint import write_checkpoint
from ..configuration import SMOL_PANDA
from ..loading import load_smol_panda
from . import hparams as H
from .data import Demos, checkpoint_config, compute_stats, pixels, policy_io


def training_model(cfg=SMOL_PANDA, progress=sys.stderr):
    """SmolLM2's real weights, frozen; vision and expert at their initialisation, trainable.
    Unpacked (plain F.linear products), so autograd runs through every part."""
    model, tok = load_smol_panda(cfg, trained=False, progress=progress)
    for p in model.backbone.parameters():
        p.requires_grad_(False)
    return model, tok


def io_dir(root: Path) -> Path:
    return Path(root) / "io"


def ensure_io(root: Path, demos: Demos | None, tok, cfg=SMOL_PANDA):
    """The statistics (from the training episodes present when the first stage starts) and
    config, written once as a checkpoint skeleton; the PolicyIO read back from it."""
    d = io_dir(root)
    if not (d / "config.json").exists():
        if demos is None:
            raise FileNotFoundError(f"{d} has no statistics yet: run stage1 first")
        stats = compute_stats(demos.episodes)
        write_checkpoint(d, {}, stats, {**checkpoint_config(cfg), "stats_episodes": len(demos.episodes)})
    return policy_io(d, tok, cfg)


def frozen_backbone(model, x: torch.Tensor) -> torch.Tensor:
    """Causal pass of embeddings x [B, T, W] through the (frozen) backbone with autograd to x:
    the engine's own Decoder on a throwaway pool. Causal over the whole row is exactly what
    the engine computes for a causal prefix, a request prompt extended on it, and decoding."""
    b, t, _ = x.shape
    bb = model.cfg.backbone
    shape = (b, bb.num_kv_heads, t, bb.head_dim)
    # one tensor per layer: a layer's write must not bump the version of K/V that an
    # earlier layer saved for its backward (views of one pool tensor would)
    pool = SimpleNamespace(k=[torch.zeros(shape, dtype=x.dtype) for _ in range(bb.depth)],
                           v=[torch.zeros(shape, dtype=x.dtype) for _ in range(bb.depth)])
    positions = torch.arange(t)[None].expand(b, t)
    mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
    return model.backbone(x, positions, pool, slice(0, b), 0, t, mask)


def frame_inputs(demos: Demos, idx: np.ndarray, io):
    """(pixels [B * cameras, 3, S, S], prompt ids per frame, episode/time pairs)."""
    imgs, prompts, pairs = [], [], []
    for i in idx:
        e, t = demos.frames[i]
        ep = demos.episodes[e]
        imgs += [ep.images[slot][t] for slot in H.CAMERAS]
        prompts.append(io.prompt_tokens(H.INSTRUCTION, ep.state[t]))
        pairs.append((ep, t))
    return pixels(imgs), prompts, pairs
