"""The ask_progress service handler: a question becomes an answer request, and its caller waits.

Each waiting caller holds an executor thread (a reentrant group), never the control loop.
The question goes through one door, its robot's language (engine/robot_language.py,
RobotLanguage.ask_progress: the checks, the estimate against the deadline, the board the
frame drains, the wait); this module only turns the request into that call and the
outcome into the response.
"""
from __future__ import annotations

import time
from typing import Callable

from ..engine.robot_language import QuestionRefused, RobotLanguage


def _not_active(state: str) -> str:
    return f"the node is {state}, not active: activate it to ask questions"


class QuestionService:
    """One robot's ask_progress: its callback is the service's."""

    def __init__(self, language: Callable[[], RobotLanguage | None], state: Callable[[], str],
                 read: Callable[[list], dict], log):
        """language() -> the robot's RobotLanguage (None while unconfigured); state() -> the
        node's lifecycle state; read(names) -> the robot's parameter values now; log: its logger."""
        self.language, self.state, self.read, self.log = language, state, read, log

    def __call__(self, request, response):
        return ask_progress(self, request, response)

    def unavailable(self) -> str:
        """Why the robot cannot answer now ("" while the node is active)."""
        state = self.state()
        return "" if state == "active" else _not_active(state)


def ask_progress(service: QuestionService, request, response):
    """Answer `request.question` from the robot's memory log, or fail with the reason."""
    t0 = time.monotonic()

    def reply(answer: str = "", error: str = ""):
        response.success, response.answer, response.error = not error, answer, error
        response.latency_s = time.monotonic() - t0
        if error:
            service.log.warning(f"ask_progress: {error}", throttle_duration_sec=0.5)
        return response

    language = service.language()
    if language is None:        # unconfigured: refused, for its text first as when configured
        return reply(error=RobotLanguage.check_question(request.question, _not_active(service.state()))[1])
    p = service.read(["answer_prompt", "answer_max_tokens", "question_timeout_s"])
    timeout = request.timeout_s if request.timeout_s > 0 else p["question_timeout_s"]
    try:
        answer = language.ask_progress(request.question, p["answer_prompt"], p["answer_max_tokens"], timeout,
                                       t0, service.unavailable)
    except QuestionRefused as e:
        return reply(error=str(e))
    return reply(answer=answer)
