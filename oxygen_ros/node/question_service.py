"""The ask_progress service handler: a question becomes an answer request, and its caller waits.

Each waiting caller holds an executor thread (a reentrant group), never the control loop:
the question reaches the engine through its robot's language (engine/robot_language.py:
the board the frame drains, the memory log, the estimate).
"""
from __future__ import annotations

import time
from typing import Callable

from ..engine.text.memory_log import PromptTooLong, question_problem
from ..engine.questions import QuestionRejected
from .runtime import Runtime

STALL_CHECK_S = 0.25     # how often a waiting caller looks whether frames have stopped


def _stalled(rt) -> str:
    """Why frames are not running now ("" while they run): the latest reason a tick made no
    chunk, if it is more recent than the last frame."""
    reason, at = rt.stats.problem
    last = rt.stats.last_frame_at()
    return reason if reason and (last is None or at > last) else ""


def _frames_needed_s(rt, tokens: int) -> float:
    """Seconds of frames an answer of `tokens` needs behind the backlog, counted from now
    (frames stopped: the estimate's clock must not run from the last frame's start)."""
    e = rt.language.answers.estimate(tokens, [], "")
    return e.frames * e.interval_s


class QuestionService:
    """One robot's ask_progress: its callback is the service's."""

    def __init__(self, runtime: Callable[[], Runtime | None], state: Callable[[], str],
                 read: Callable[[list], dict], log):
        """runtime() -> the robot's Runtime (None while unconfigured); state() -> the node's
        lifecycle state; read(names) -> the robot's parameter values now; log: its logger."""
        self.runtime, self.state, self.read, self.log = runtime, state, read, log

    def __call__(self, request, response):
        return ask_progress(self, request, response)


def ask_progress(service: QuestionService, request, response):
    """Answer `request.question` from the robot's memory log, or fail with the reason."""
    t0 = time.monotonic()

    def reply(answer: str = "", error: str = ""):
        response.success, response.answer, response.error = not error, answer, error
        response.latency_s = time.monotonic() - t0
        if error:
            service.log.warning(f"ask_progress: {error}", throttle_duration_sec=0.5)
        return response

    question = " ".join(request.question.split())
    problem = question_problem(question)
    if problem:
        return reply(error=problem)
    rt = service.runtime()
    if rt is None or service.state() != "active":
        return reply(error=f"the node is {service.state()}, not active: activate it to ask questions")
    limit = rt.model.cfg.max_prompt_tokens
    if len(question) > 16 * limit:
        return reply(error=f"question too long: {len(question)} characters")
    p = service.read(["answer_prompt", "answer_max_tokens", "question_timeout_s"])
    timeout = request.timeout_s if request.timeout_s > 0 else p["question_timeout_s"]
    tokens = min(p["answer_max_tokens"], rt.engine.config.max_new_tokens)
    # queued only while the answer can be complete before the caller's deadline
    language = rt.language
    estimate = language.estimate(tokens, _stalled(rt))
    if estimate.seconds > timeout:
        language.answers.note_refused()
        return reply(error=f"cannot answer within {timeout:g} s: {estimate.describe()}")
    try:
        q = language.ask(p["answer_prompt"], question, tokens)
    except (PromptTooLong, QuestionRejected) as e:
        return reply(error=str(e))
    if service.state() != "active":          # deactivated meanwhile: nobody would answer
        language.board.fail(q, f"the node is {service.state()}, not active: activate it to ask questions")
    deadline = t0 + timeout
    while not q.event.wait(min(STALL_CHECK_S, max(0.0, deadline - time.monotonic()))):
        left = deadline - time.monotonic()
        stalled = _stalled(rt)
        # frames stopped (an input died, a failure): once even resuming now could not finish
        # the answer in time, say so now rather than at the deadline
        if left > 0 and not (stalled and _frames_needed_s(rt, tokens) > left):
            continue
        # still on the board: never handed to the engine; else the engine keeps decoding it
        where = ("it was not started" if language.board.withdraw(q)
                 else f"request {q.request_id} keeps streaming on the answer topic")
        if left > 0:
            return reply(error=f"cannot answer within {timeout:g} s any more: no frame is running ({stalled}); "
                               f"{left:.1f} s left ({where}); at admission: {estimate.describe()}")
        now = language.answers.estimate(tokens, [], stalled)
        return reply(error=f"timed out after {timeout:g} s waiting for the answer ({where}); at admission: "
                           f"{estimate.describe()}; now: {now.describe()}")
    if q.error:
        return reply(error=q.error)
    return reply(answer=q.answer)
