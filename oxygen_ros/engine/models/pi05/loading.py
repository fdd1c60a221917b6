"""The pi0.5 family's profiles as models: `tiny` random with the byte tokenizer,
`pi05-quarter` random (or from a checkpoint) with WideByteTokenizer, `pi05` from an openpi
or LeRobot checkpoint (models/pi05/checkpoint.py) with PaliGemma's tokenizer."""
from __future__ import annotations

import torch

from ...config import parse_dtype
from ...text.tokenizer import ByteTokenizer, WideByteTokenizer
from .checkpoint import load_pi05
from .modeling import build_random_model


def load(name: str, cfg, checkpoint=None, tokenizer_path=None, dtype="float32", device="cpu"):
    if checkpoint:
        if name == "tiny":
            raise ValueError("the tiny profile has random weights; a checkpoint is for pi05 or pi05-quarter")
        # it places and casts the weights itself (no second cast here)
        return load_pi05(cfg, checkpoint, tokenizer_path, dtype, device)
    if name == "pi05":
        raise ValueError("the pi05 profile has no random-weight mode (3B parameters); pass "
                         "checkpoint=<path to a pi0.5 model.safetensors or its directory>, "
                         "or use pi05-quarter for random weights")
    tok = ByteTokenizer() if name == "tiny" else WideByteTokenizer(cfg.backbone.vocab_size)
    model = build_random_model(cfg).to(device=torch.device(device), dtype=parse_dtype(dtype))
    return model.eval().pack_weights(), tok
