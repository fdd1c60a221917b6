"""Progress questions between the service callbacks and the control loop (thread-safe).

A service callback `open`s a question and waits on its event; the control loop `take`s
new questions, submits them to the engine, and `finish`es them when their answer is
done. A question counts as in flight until the engine is done with it, even after its
caller timed out, so callers cannot pile up more requests than `max_in_flight`.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


class QuestionRejected(RuntimeError):
    pass


@dataclass(eq=False)   # identity: two questions with the same text are different
class Question:
    prompt: str
    max_new_tokens: int
    received: float = field(default_factory=time.monotonic)
    request_id: int = -1
    answer: str = ""
    error: str = ""
    event: threading.Event = field(default_factory=threading.Event)


class QuestionBoard:
    def __init__(self, max_in_flight: int):
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._new: list[Question] = []
        self._by_request: dict[int, Question] = {}
        self.answered = 0
        self.failed = 0

    def in_flight(self) -> int:
        with self._lock:
            return len(self._new) + len(self._by_request)

    def open(self, prompt: str, max_new_tokens: int) -> Question:
        with self._lock:
            n = len(self._new) + len(self._by_request)
            if n >= self.max_in_flight:
                raise QuestionRejected(f"too many questions in flight ({n}, max_concurrent_questions "
                                       f"= {self.max_in_flight}); try again later")
            q = Question(prompt, max_new_tokens)
            self._new.append(q)
            return q

    def waiting_tokens(self) -> list[int]:
        """The answer budgets of the questions not handed to the engine yet, in order."""
        with self._lock:
            return [q.max_new_tokens for q in self._new]

    def take(self) -> list[Question]:
        with self._lock:
            new, self._new = self._new, []
            return new

    def submitted(self, q: Question, request_id: int) -> None:
        with self._lock:
            q.request_id = request_id
            self._by_request[request_id] = q

    def finish(self, request_id: int, answer: str, error: str = "") -> bool:
        with self._lock:
            q = self._by_request.pop(request_id, None)
        if q is None:
            return False
        self._resolve(q, answer, error)
        return True

    def withdraw(self, q: Question) -> bool:
        """Drop a question that was not handed to the engine yet (its caller gave up)."""
        with self._lock:
            if q in self._new:
                self._new.remove(q)
                return True
            return False

    def fail(self, q: Question, error: str) -> None:
        with self._lock:
            self._by_request.pop(q.request_id, None)
        self._resolve(q, "", error)

    def fail_all(self, error: str) -> None:
        with self._lock:
            pending = self._new + list(self._by_request.values())
            self._new, self._by_request = [], {}
        for q in pending:
            self._resolve(q, "", error)

    def _resolve(self, q: Question, answer: str, error: str) -> None:
        q.answer, q.error = answer, error
        if error:
            self.failed += 1
        else:
            self.answered += 1
        q.event.set()
