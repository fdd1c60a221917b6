"""One robot's language life, ROS-free: the node drives one per robot, `oxygen serve` one per
session, so neither front door keeps its own copy of it.

It holds which narration/memory streams are due and live, the memory log, the questions
(the board a waiting caller shares with the frame, deadlines, the answer estimate), the
answer prompt, and what a finished request does. All of it is this robot's alone: a
caller that catches an exception from it keeps the fault with this robot.

A caller's progress question has one door, `ask_progress` (the node's ask_progress service:
checked, estimated against its deadline, put on the board and waited for, or refused with the
reason); `check_question` is the text check alone (an unconfigured node, `oxygen serve`).
"""
from __future__ import annotations

import time
from typing import Callable

from .admission import frames_to_finish
from .answer_estimate import AnswerEstimator, Estimate
from .text.memory_log import MemoryLog, PromptTooLong, question_problem
from .questions import Question, QuestionBoard, QuestionRejected
from .requests import LanguageRequest, RequestRejected

STREAMS = ("narration", "memory")
STALL_CHECK_S = 0.25     # how often a waiting caller looks whether frames have stopped


class QuestionRefused(ValueError):
    """A progress question gets no answer: the message is the reason its caller is given."""


def _no_stall() -> str:
    return ""


class RobotLanguage:
    def __init__(self, engine, prompt_limit: int, memory_log_size: int,
                 max_questions: int = 1, period_s: float = 0.0, stalled: Callable[[], str] = _no_stall):
        """engine: this robot's side of the engine (submit(req) -> id, prompt_tokens(text),
        backlog(), config, frame_index): an OxygenEngine or a fleet's RobotView; the answer
        prompt is fit to prompt_limit as the engine counts it (a learned prompt's marker is
        its rows, not its text); max_questions: questions in flight on the
        board; period_s: the frame period the answer estimate starts from; stalled() -> why
        this robot's frames are not running now ("" while they run), for a waiting question."""
        self.engine = engine
        self._prompt_limit, self._stalled = prompt_limit, stalled
        self.memory = MemoryLog(memory_log_size)
        self.board = QuestionBoard(max_questions)
        self.answers = AnswerEstimator(period_s)
        self.live = dict.fromkeys(STREAMS)          # stream -> its request still decoding, or None
        self.skipped = dict.fromkeys(STREAMS, 0)    # due requests not started (one still live, rejected)
        self.deadlines: dict[int, float] = {}       # answer request id -> monotonic deadline

    # -- requests ------------------------------------------------------------------------------
    def start(self, stream: str, prompt: str, max_tokens: int) -> int:
        """Submit one request now; its id. RequestRejected from the engine."""
        return self.engine.submit(LanguageRequest(prompt, stream, max_tokens))

    def begin_frame(self, settings: dict) -> list[tuple[str, RequestRejected]]:
        """At a frame's start, before it runs: the board's questions first (a caller waits),
        then each stream whose turn it is, then the estimate's view of the backlog.
        settings: the node's parameters of the same names ({stream}_every_n_frames,
        {stream}_prompt, {stream}_max_tokens). Returns the streams the engine refused."""
        self.start_questions()
        refused = self._start_due_streams(settings)
        self.answers.frame_started(self.engine.backlog())   # what a question asked now waits behind
        return refused

    def _start_due_streams(self, settings: dict) -> list[tuple[str, RequestRejected]]:
        frame, cap = self.engine.frame_index, self.engine.config.max_new_tokens
        refused = []
        for stream in STREAMS:
            every = settings[f"{stream}_every_n_frames"]
            if not every or frame % every:
                continue
            if self.live[stream] is not None:        # the previous one is still decoding
                self.skipped[stream] += 1
                continue
            try:
                self.live[stream] = self.start(stream, settings[f"{stream}_prompt"],
                                               min(settings[f"{stream}_max_tokens"], cap))
            except RequestRejected as e:
                self.skipped[stream] += 1
                refused.append((stream, e))
        return refused

    # -- questions -----------------------------------------------------------------------------
    def answer_prompt(self, template: str, question: str) -> str:
        """`template` filled with the memory log and `question`, cut to the prompt limit;
        PromptTooLong if even an empty memory does not fit; RequestRejected if the template
        names a part the model lacks."""
        return self.memory.answer_prompt(template, question, self.engine.prompt_tokens, self._prompt_limit)

    def estimate(self, tokens: int, stalled: str = "") -> Estimate:
        """When an answer of `tokens` asked now would be complete, behind the board's questions."""
        return self.answers.estimate(tokens, self.board.waiting_tokens(), stalled)

    def ask(self, template: str, question: str, tokens: int) -> Question:
        """A question onto the board (any thread); the next frame starts it and its caller
        waits on `Question.event`. PromptTooLong, QuestionRejected, RequestRejected."""
        return self.board.open(self.answer_prompt(template, question), tokens)

    def start_questions(self) -> None:
        """The board's new questions to the engine (the frame's thread)."""
        for q in self.board.take():
            try:
                self.board.submitted(q, self.start("answer", q.prompt, q.max_new_tokens))
            except RequestRejected as e:
                self.board.fail(q, f"the engine rejected the question: {e}")

    @staticmethod
    def check_question(text: str, unavailable: str = "") -> tuple[str, str]:
        """(the question as asked: whitespace collapsed, why it cannot be: "" if it can). Its
        text's problem (empty, control characters) comes before `unavailable` (why the robot
        cannot answer now), so a probe with an empty question gets the same reply in any state."""
        question = " ".join(text.split())
        return question, question_problem(question) or unavailable

    def ask_progress(self, text: str, template: str, max_tokens: int, timeout_s: float, asked_at: float,
                     unavailable: Callable[[], str]) -> str:
        """A caller's question, asked and waited for on its own thread (never the frame's): the
        answer, or QuestionRefused with why not. Refused at once for its text, `unavailable()`
        (why the robot cannot answer now, "" when it can), its length, or an answer that could
        not be complete by asked_at + timeout_s; once queued, as soon as stalled frames could
        no longer finish it in time, or at that deadline."""
        question, problem = self.check_question(text, unavailable())
        if problem:
            raise QuestionRefused(problem)
        if len(question) > 16 * self._prompt_limit:
            raise QuestionRefused(f"question too long: {len(question)} characters")
        tokens = min(max_tokens, self.engine.config.max_new_tokens)
        # queued only while the answer can be complete before the caller's deadline
        estimate = self.estimate(tokens, self._stalled())
        if estimate.seconds > timeout_s:
            self.answers.note_refused()
            raise QuestionRefused(f"cannot answer within {timeout_s:g} s: {estimate.describe()}")
        try:
            q = self.ask(template, question, tokens)
        except (PromptTooLong, QuestionRejected, RequestRejected) as e:
            raise QuestionRefused(str(e)) from e
        why = unavailable()
        if why:                            # gone meanwhile (deactivated): nobody would answer
            self.board.fail(q, why)
        return self._await_answer(q, tokens, estimate, asked_at + timeout_s, timeout_s)

    def _await_answer(self, q: Question, tokens: int, estimate: Estimate, deadline: float, timeout_s: float) -> str:
        while not q.event.wait(min(STALL_CHECK_S, max(0.0, deadline - time.monotonic()))):
            left = deadline - time.monotonic()
            stalled = self._stalled()
            # frames stopped (an input died, a failure): once even resuming now could not finish
            # the answer in time, say so now rather than at the deadline
            if left > 0 and not (stalled and self._frames_needed_s(tokens) > left):
                continue
            # still on the board: never handed to the engine; else the engine keeps decoding it
            where = ("it was not started" if self.board.withdraw(q)
                     else f"request {q.request_id} keeps streaming on the answer topic")
            if left > 0:
                raise QuestionRefused(f"cannot answer within {timeout_s:g} s any more: no frame is running "
                                      f"({stalled}); {left:.1f} s left ({where}); at admission: {estimate.describe()}")
            now = self.answers.estimate(tokens, [], stalled)
            raise QuestionRefused(f"timed out after {timeout_s:g} s waiting for the answer ({where}); at admission: "
                                  f"{estimate.describe()}; now: {now.describe()}")
        if q.error:
            raise QuestionRefused(q.error)
        return q.answer

    def _frames_needed_s(self, tokens: int) -> float:
        """Seconds of frames an answer of `tokens` needs behind the backlog, counted from now
        (frames stopped: the estimate's clock must not run from the last frame's start)."""
        e = self.answers.estimate(tokens, [], "")
        return e.frames * e.interval_s

    def no_frame(self) -> None:
        """A tick made no frame for this robot: the estimate does not count the gap as a frame."""
        self.answers.no_frame()

    def ask_now(self, template: str, question: str, tokens: int, timeout_s: float,
                interval_s: float | None) -> int:
        """Start an answer at once, with a deadline (a caller that does not wait on the
        board); its request id. ValueError when, at `interval_s` a frame, the work ahead
        cannot be done within `timeout_s`; PromptTooLong; RequestRejected."""
        prompt = self.answer_prompt(template, question)
        if interval_s:
            frames = frames_to_finish(self.engine.backlog(), tokens)
            if frames * interval_s > timeout_s:
                raise ValueError(f"cannot be answered within {timeout_s:g} s: about {frames} frames of this "
                                 f"session ({frames * interval_s:.1f} s) for the language work ahead")
        rid = self.start("answer", prompt, tokens)
        self.deadlines[rid] = time.monotonic() + timeout_s
        return rid

    def expired(self, now: float) -> list[int]:
        """The answers past their deadline, forgotten here: the caller aborts them in the engine."""
        gone = [rid for rid, deadline in self.deadlines.items() if now > deadline]
        for rid in gone:
            del self.deadlines[rid]
        return gone

    def fail_questions(self, error: str) -> None:
        """Every question still on the board fails with `error` (its caller wakes); deadlines go."""
        self.board.fail_all(error)
        self.deadlines.clear()

    # -- a finished request --------------------------------------------------------------------
    def finished(self, d) -> bool:
        """What a finished request (a TextDelta with done) does: its stream may start the next
        one, a memory entry joins the log, an answer wakes its caller. True when the memory
        log dropped its oldest entry to make room."""
        self.deadlines.pop(d.request_id, None)
        if self.live.get(d.stream) == d.request_id:
            self.live[d.stream] = None               # first: the stream may start its next request
        if d.stream == "memory" and not d.error:
            return self.memory.add(d.full_text)
        if d.stream == "answer":
            self.board.finish(d.request_id, d.full_text, d.error)    # wakes the waiting caller
        return False

    def figures(self) -> dict:
        """Its figures for diagnostics."""
        board, last = self.board, self.answers.last
        return {"questions_in_flight": board.in_flight(), "questions_answered": board.answered,
                "questions_failed": board.failed, "questions_waiting": len(board.waiting_tokens()),
                "questions_refused_deadline": self.answers.refused,
                "question_estimate_s": last.seconds if last else 0.0,
                "memory_entries": len(self.memory),
                "narrations_skipped": self.skipped["narration"],
                "memory_requests_skipped": self.skipped["memory"]}
