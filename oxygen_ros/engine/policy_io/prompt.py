"""pi0.5's language prefix: cleaned task text, discretised state, and the two prompt formats.

With state (both conventions): "Task: {cleaned}, State: {bins};\\nAction: ", tokenized with
a leading BOS. State-free (openpi's pi05_libero, discrete_state_input=False): openpi tokenizes
encode(cleaned, add_bos=True) + encode("\\n"), which is not always the same ids as encoding
cleaned + "\\n" in one piece; as text it is cleaned + "\\n", and `encode_prompt` tokenizes the
two pieces separately as openpi does.
An empty task is allowed: openpi and LeRobot both accept "" (openpi only rejects a missing one).
"""
from __future__ import annotations

import inspect
import logging

import numpy as np

log = logging.getLogger(__name__)

STATE_BIN_EDGES = np.linspace(-1.0, 1.0, 256 + 1)[:-1]
MAX_PROMPT_TOKENS = 200          # openpi max_token_len for pi0.5; LeRobot tokenizer max_length


def clean_task(task: str) -> str:
    return task.strip().replace("_", " ").replace("\n", " ")


def discretize(normalized_state: np.ndarray) -> list[int]:
    """Bin index per dim, no clipping: below -1 gives -1, from 1 - 2/256 up gives 255."""
    return (np.digitize(normalized_state, bins=STATE_BIN_EDGES) - 1).tolist()


def state_prompt(task: str, bins: list[int]) -> str:
    return f"Task: {clean_task(task)}, State: {' '.join(map(str, bins))};\nAction: "


def stateless_prompt(task: str) -> str:
    return clean_task(task) + "\n"


def _encode(tokenizer, text: str, bos: bool) -> list[int]:
    """SentencePiece-style encode(text, add_bos=), HF-style add_special_tokens=, else encode(text)."""
    params = inspect.signature(tokenizer.encode).parameters
    for flag in ("add_bos", "add_special_tokens"):
        if flag in params:
            return list(tokenizer.encode(text, **{flag: bos}))
    return list(tokenizer.encode(text))


def encode_prompt(tokenizer, task: str, bins: list[int] | None,
                  max_tokens: int = MAX_PROMPT_TOKENS) -> list[int]:
    """Token ids as the conventions build them, keeping the first max_tokens (with a warning)."""
    if bins is None:
        ids = _encode(tokenizer, clean_task(task), True) + _encode(tokenizer, "\n", False)
    else:
        ids = _encode(tokenizer, state_prompt(task, bins), True)
    if len(ids) > max_tokens:
        log.warning("prompt is %d tokens, longer than %d: keeping the first %d (the task text "
                    "or state may be cut)", len(ids), max_tokens, max_tokens)
        ids = ids[:max_tokens]
    return ids
