"""One robot's language life, ROS-free: the node drives one per robot, `oxygen serve` one per
session, so neither front door keeps its own copy of it.

It holds which narration/memory streams are due and live, the memory log, the questions
(the board a waiting caller shares with the frame, deadlines, the answer estimate), the
answer prompt, and what a finished request does. All of it is this robot's alone: a
caller that catches an exception from it keeps the fault with this robot.
"""
from __future__ import annotations

import time

from .admission import frames_to_finish
from .answer_estimate import AnswerEstimator, Estimate
from .text.memory_log import MemoryLog
from .questions import Question, QuestionBoard
from .requests import LanguageRequest, RequestRejected

STREAMS = ("narration", "memory")


class RobotLanguage:
    def __init__(self, engine, count_tokens, prompt_limit: int, memory_log_size: int,
                 max_questions: int = 1, period_s: float = 0.0):
        """engine: this robot's side of the engine (submit(req) -> id, backlog(), config,
        frame_index): an OxygenEngine or a fleet's RobotView; count_tokens(text) -> int and
        prompt_limit bound the answer prompt; max_questions: questions in flight on the
        board; period_s: the frame period the answer estimate starts from."""
        self.engine = engine
        self._count_tokens, self._prompt_limit = count_tokens, prompt_limit
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
        PromptTooLong if even an empty memory does not fit."""
        return self.memory.answer_prompt(template, question, self._count_tokens, self._prompt_limit)

    def estimate(self, tokens: int, stalled: str = "") -> Estimate:
        """When an answer of `tokens` asked now would be complete, behind the board's questions."""
        return self.answers.estimate(tokens, self.board.waiting_tokens(), stalled)

    def ask(self, template: str, question: str, tokens: int) -> Question:
        """A question onto the board (any thread); the next frame starts it and its caller
        waits on `Question.event`. PromptTooLong, QuestionRejected."""
        return self.board.open(self.answer_prompt(template, question), tokens)

    def start_questions(self) -> None:
        """The board's new questions to the engine (the frame's thread)."""
        for q in self.board.take():
            try:
                self.board.submitted(q, self.start("answer", q.prompt, q.max_new_tokens))
            except RequestRejected as e:
                self.board.fail(q, f"the engine rejected the question: {e}")

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
