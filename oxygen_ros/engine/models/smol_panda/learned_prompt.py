"""A learned prompt: embeddings trained for one kind of request (prompt tuning) that stand
where a prompt template writes the marker <|learned_prompt|>.

The answer to "what have you done?" is such a request: SmolLM2 stays frozen, and 16 input
embeddings placed after the memory log and the question teach it to say the task's progress
in one of a few sentences (training/answers.py). They enter as token ids past the vocabulary
(vocab_size + i for row i), so the engine schedules, pads and batches them as any prompt
token; only the embedding lookup (SmolPandaModel.embed_request) knows them, and no logit is
ever computed for them. The observation prefix, hence the actions and the narration, never
contains them.

File: learned_prompt.safetensors in the checkpoint directory, one tensor "learned_prompt"
[n, backbone width]; absent = no learned prompt (a prompt with the marker is refused).
"""
from __future__ import annotations

from pathlib import Path

import torch

from ...requests import RequestRejected

MARKER = "<|learned_prompt|>"
FILE = "learned_prompt.safetensors"
TENSOR = "learned_prompt"


class LearnedPromptMissing(RequestRejected):
    """A prompt names the learned prompt, and the checkpoint has none."""


def splice(tok, prompt: str, vocab_size: int, rows: int) -> list[int]:
    """The prompt's token ids with each MARKER replaced by ids vocab_size .. vocab_size + rows - 1."""
    pieces = prompt.split(MARKER)
    if len(pieces) > 1 and rows == 0:
        raise LearnedPromptMissing(f"the prompt uses {MARKER} but the checkpoint has no learned prompt "
                                   f"({FILE}); remove the marker or train one (docs/training.md, Answers)")
    ids: list[int] = []
    for i, piece in enumerate(pieces):
        if i:
            ids += range(vocab_size, vocab_size + rows)
        if piece:
            ids += tok.encode(piece)
    return ids


def read(checkpoint_dir: Path, width: int) -> torch.Tensor | None:
    """The checkpoint's learned prompt [n, width] in fp32, or None when it has none."""
    from safetensors.torch import load_file

    path = Path(checkpoint_dir) / FILE
    if not path.is_file():
        return None
    state = load_file(str(path))
    rows = state.get(TENSOR)
    if rows is None or rows.dim() != 2 or rows.shape[1] != width or set(state) != {TENSOR}:
        raise ValueError(f"{path} must hold one tensor {TENSOR!r} [n, {width}], got "
                         f"{ {k: list(v.shape) for k, v in state.items()} }")
    return rows.float()


def write(checkpoint_dir: Path, rows: torch.Tensor) -> Path:
    """Save rows [n, width] in fp16 beside the checkpoint's model.safetensors."""
    from safetensors.torch import save_file

    path = Path(checkpoint_dir) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({TENSOR: rows.detach().to("cpu", torch.float16).contiguous()}, str(tmp),
              metadata={"profile": "smol-panda"})
    tmp.replace(path)
    return path
