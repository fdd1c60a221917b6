"""Language requests and the text deltas they produce."""
from __future__ import annotations

from dataclasses import dataclass


class RequestRejected(RuntimeError):
    """The request cannot be accepted (queue full, empty or over-long prompt)."""


@dataclass
class LanguageRequest:
    """Text to generate after the observation prefix of the frame it is admitted in.

    prompt: text appended after the prefix (e.g. a narration instruction, a question).
    ignore_eos: decode exactly max_new_tokens (fixed-length benchmark workloads).
    """
    prompt: str
    stream: str = "narration"
    max_new_tokens: int = 32
    ignore_eos: bool = False
    request_id: int = -1
    start_frame: int = -1


@dataclass
class TextDelta:
    request_id: int
    stream: str
    start_frame: int
    delta: str
    token_count: int
    done: bool = False
    full_text: str = ""
    error: str = ""
