"""A robot's text memory: the most recent finished memory entries, and the answer prompt
that carries them together with a progress question (the node and `oxygen serve` alike)."""
from __future__ import annotations

import collections
import re
import threading

from .prompts import fill_answer

# chat control markers such as <|im_start|>: user text must not open or close turns
_CONTROL_MARKER = re.compile(r"<\|[^<>|]*\|>")


def plain_text(text: str) -> str:
    return _CONTROL_MARKER.sub("", text)


def question_problem(question: str) -> str:
    """Why a question (whitespace already collapsed) cannot be asked; "" if it can."""
    if not question:
        return "empty question"
    bad = sorted({f"U+{ord(c):04X}" for c in question if ord(c) < 32 or 127 <= ord(c) < 160})
    if bad:
        return f"question contains control characters ({', '.join(bad[:5])})"
    return ""


class PromptTooLong(ValueError):
    """The question does not fit the model's prompt limit even with an empty memory."""


class MemoryLog:
    def __init__(self, size: int):
        self._entries: collections.deque[str] = collections.deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, text: str) -> bool:
        """Keep `text` (whitespace collapsed); True when the oldest entry fell out to make room."""
        text = " ".join(text.split())
        if not text:
            return False
        with self._lock:
            full = len(self._entries) == self._entries.maxlen
            self._entries.append(text)
            return full

    def entries(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def answer_prompt(self, template: str, question: str, count_tokens, limit: int) -> str:
        """`template` with {memory} (one "- entry" line each) and {question} filled in.

        The oldest entries are left out until the prompt fits `limit` tokens
        (`count_tokens(text) -> int`); PromptTooLong if even no memory does not fit.
        """
        entries = [plain_text(e) for e in self.entries()]
        question = plain_text(question)
        while True:
            prompt = fill_answer(template, entries, question)
            n = count_tokens(prompt)
            if n <= limit:
                return prompt
            if not entries:
                raise PromptTooLong(f"question too long: the answer prompt takes {n} tokens, "
                                    f"the model's limit is {limit}")
            entries = entries[1:]
