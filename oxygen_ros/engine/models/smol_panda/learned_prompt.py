"""Learned prompts: embeddings trained for one kind of request (prompt tuning) that stand
where a prompt template writes their marker.

Two kinds, each a block of 16 rows: the answer to "what have you done?" (<|learned_prompt|>,
training/answers.py) and the narration of where the cube is (<|learned_narration|>,
training/narration.py). SmolLM2 stays frozen; the rows enter as token ids past the
vocabulary (the blocks one after another: vocab_size + offset + i for row i), so the engine
schedules, pads and batches them as any prompt token; only the embedding lookup
(SmolPandaModel.embed_request) knows them, and no logit is ever computed for them. The
observation prefix, hence the actions, never contains them.

File: learned_prompt.safetensors in the checkpoint directory, one tensor [n, backbone width]
per block, named as its marker without the brackets; absent = no learned prompt (a prompt
with a marker whose block is missing is refused).
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from ...requests import RequestRejected

FILE = "learned_prompt.safetensors"
ANSWER = "learned_prompt"          # the answer's block (its name predates the narration's)
NARRATION = "learned_narration"
BLOCKS = (ANSWER, NARRATION)        # in id order


def marker(name: str) -> str:
    return f"<|{name}|>"


_MARKERS = re.compile("|".join(re.escape(marker(n)) for n in BLOCKS))


class LearnedPromptMissing(RequestRejected):
    """A prompt names a learned prompt the checkpoint does not have."""


def layout(blocks: dict[str, torch.Tensor]) -> dict[str, range]:
    """Each block's rows in the concatenation (BLOCKS order), as offsets past the vocabulary."""
    out, at = {}, 0
    for name in BLOCKS:
        if name in blocks:
            out[name] = range(at, at + blocks[name].shape[0])
            at += blocks[name].shape[0]
    return out


def splice(tok, prompt: str, vocab_size: int, rows: dict[str, range]) -> list[int]:
    """The prompt's token ids with each block's marker replaced by that block's ids."""
    ids, at = [], 0
    for m in _MARKERS.finditer(prompt):
        name = m.group()[2:-2]
        if name not in rows:
            raise LearnedPromptMissing(
                f"the prompt uses {m.group()} but the checkpoint has no such learned prompt "
                f"({FILE} holds {sorted(rows) or 'none'}); remove the marker or train it (docs/training.md)")
        if m.start() > at:
            ids += tok.encode(prompt[at:m.start()])
        ids += [vocab_size + i for i in rows[name]]
        at = m.end()
    return ids + (tok.encode(prompt[at:]) if at < len(prompt) else [])


def read(checkpoint_dir: Path, width: int) -> dict[str, torch.Tensor]:
    """The checkpoint's learned prompts {block: [n, width] fp32}, empty when it has none."""
    from safetensors.torch import load_file

    path = Path(checkpoint_dir) / FILE
    if not path.is_file():
        return {}
    state = load_file(str(path))
    bad = {k: list(v.shape) for k, v in state.items() if k not in BLOCKS or v.dim() != 2 or v.shape[1] != width}
    if bad or not state:
        raise ValueError(f"{path} must hold tensors named {' or '.join(map(repr, BLOCKS))}, each [n, {width}], got "
                         f"{ {k: list(v.shape) for k, v in state.items()} }")
    return {k: v.float() for k, v in state.items()}


def write(checkpoint_dir: Path, rows: torch.Tensor, name: str = ANSWER) -> Path:
    """Save block `name` [n, width] in fp16 beside the checkpoint's model.safetensors, keeping
    the file's other blocks."""
    from safetensors.torch import load_file, save_file

    if name not in BLOCKS:
        raise ValueError(f"unknown learned prompt {name!r}: one of {BLOCKS}")
    path = Path(checkpoint_dir) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    state = load_file(str(path)) if path.is_file() else {}
    state[name] = rows.detach().to("cpu", torch.float16).contiguous()
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp), metadata={"profile": "smol-panda"})
    tmp.replace(path)
    return path
