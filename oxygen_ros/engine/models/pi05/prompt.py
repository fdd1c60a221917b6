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

import numpy as np

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


def encode_prompt(tokenizer, task: str, bins: list[int] | None) -> list[int]:
    """Token ids as the conventions build them (PolicyIO.prompt_tokens cuts them to the limit)."""
    if bins is None:
        return _encode(tokenizer, clean_task(task), True) + _encode(tokenizer, "\n", False)
    return _encode(tokenizer, state_prompt(task, bins), True)
