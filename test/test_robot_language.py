"""RobotLanguage (engine/robot_language.py), one robot's language life that the node and
`oxygen serve` both drive, without ROS or a model: a stream starts only when its turn comes
and its last request finished; a finished memory entry joins the log and the next answer
prompt; a board question reaches the engine at the frame's start and its caller wakes with
the answer; an answer started at once carries a deadline, and expires past it."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from oxygen_ros.engine.admission import Backlog
from oxygen_ros.engine.requests import RequestRejected, TextDelta
from oxygen_ros.engine.robot_language import QuestionRefused, RobotLanguage

SETTINGS = {"narration_every_n_frames": 1, "narration_prompt": "say", "narration_max_tokens": 8,
            "memory_every_n_frames": 2, "memory_prompt": "note", "memory_max_tokens": 99}


class FakeEngine:
    """The surface RobotLanguage uses: submit, prompt_tokens, backlog, config, frame_index."""

    def __init__(self, reject: bool = False):
        self.config = SimpleNamespace(max_new_tokens=16)
        self.frame_index, self.submitted, self.reject = 0, [], reject

    def submit(self, req) -> int:
        if self.reject:
            raise RequestRejected("queue full")
        self.submitted.append(req)
        return len(self.submitted)

    def backlog(self) -> Backlog:
        return Backlog(live=(), queued=(), slots=4, steps_per_frame=4)

    def prompt_tokens(self, prompt: str) -> int:
        """A token a word: RobotLanguage fits the answer prompt by the engine's count."""
        return len(prompt.split())


def done(rid: int, stream: str, text: str = "", error: str = "") -> TextDelta:
    return TextDelta(request_id=rid, stream=stream, start_frame=0, delta="", token_count=0, done=True,
                     full_text=text, error=error)


def language(engine=None, **kw) -> RobotLanguage:
    return RobotLanguage(engine or FakeEngine(), 200, memory_log_size=2,
                         max_questions=2, period_s=0.1, **kw)


def test_a_stream_starts_on_its_turn_and_only_once_its_last_request_finished():
    lang = language()
    assert lang.begin_frame(SETTINGS) == []
    reqs = lang.engine.submitted
    assert [(r.stream, r.max_new_tokens) for r in reqs] == [("narration", 8), ("memory", 16)]  # capped
    lang.engine.frame_index = 1
    lang.begin_frame(SETTINGS)                     # narration still live: skipped; memory not due
    assert len(reqs) == 2 and lang.skipped == {"narration": 1, "memory": 0}
    assert lang.finished(done(1, "narration", "moving")) is False
    lang.engine.frame_index = 2
    lang.begin_frame(SETTINGS)                     # narration free again; memory still live
    assert [r.stream for r in reqs] == ["narration", "memory", "narration"]
    assert lang.skipped == {"narration": 1, "memory": 1}


def test_a_refused_stream_is_counted_and_returned():
    lang = language(FakeEngine(reject=True))
    refused = lang.begin_frame(SETTINGS)
    assert [s for s, _ in refused] == ["narration", "memory"]
    assert lang.skipped == {"narration": 1, "memory": 1} and lang.live == {"narration": None, "memory": None}


def test_memory_entries_reach_the_answer_prompt_and_the_oldest_leaves_a_full_log():
    lang = language()
    assert lang.finished(done(5, "memory", "picked  the cube")) is False
    assert lang.finished(done(6, "memory", "failed", error="aborted")) is False   # errors are not kept
    assert lang.finished(done(7, "memory", "placed it")) is False
    assert lang.finished(done(8, "memory", "retreated")) is True                  # size 2: one fell out
    prompt = lang.answer_prompt("M:\n{memory}\nQ: {question}", "what now?")
    assert prompt == "M:\n- placed it\n- retreated\nQ: what now?"


def test_a_board_question_starts_at_the_frame_and_its_caller_wakes_with_the_answer():
    lang = language()
    q = lang.ask("{memory} {question}", "done?", 4)
    assert lang.figures()["questions_waiting"] == 1
    lang.begin_frame({**SETTINGS, "narration_every_n_frames": 0, "memory_every_n_frames": 0})
    assert [r.stream for r in lang.engine.submitted] == ["answer"] and q.request_id == 1
    lang.finished(done(1, "answer", "yes"))
    assert q.event.is_set() and q.answer == "yes" and lang.figures()["questions_answered"] == 1


def test_an_answer_started_at_once_expires_past_its_deadline():
    lang = language()
    rid = lang.ask_now("{memory} {question}", "done?", 4, timeout_s=5.0, interval_s=None)
    assert lang.expired(0.0) == [] and rid in lang.deadlines
    assert lang.expired(float("inf")) == [rid] and not lang.deadlines
    with pytest.raises(ValueError, match="cannot be answered within"):
        lang.ask_now("{memory} {question}", "done?", 16, timeout_s=0.5, interval_s=1.0)


# -- a caller's progress question: one door (the node's ask_progress) --------------------------

NO_FRAME = {**SETTINGS, "narration_every_n_frames": 0, "memory_every_n_frames": 0}
TEMPLATE = "{memory} {question}"


def ask(lang, text, timeout_s=5.0, tokens=4, unavailable=lambda: ""):
    return lang.ask_progress(text, TEMPLATE, tokens, timeout_s, time.monotonic(), unavailable)


def refusal(lang, text, **kw) -> str:
    with pytest.raises(QuestionRefused) as e:
        ask(lang, text, **kw)
    return str(e.value)


def test_the_question_text_is_checked_first_with_the_services_messages():
    lang = language()
    lang.begin_frame(NO_FRAME)
    off = lambda: "the node is inactive, not active: activate it to ask questions"   # noqa: E731
    assert refusal(lang, "  \n ", unavailable=off) == "empty question"
    assert refusal(lang, "what\x00 now\x1b", unavailable=off) == "question contains control characters (U+0000, U+001B)"
    assert refusal(lang, "done?", unavailable=off) == off()
    assert refusal(lang, "x" * (16 * 200 + 1)) == f"question too long: {16 * 200 + 1} characters"
    # the same check without a robot (an unconfigured node) and for oxygen serve
    assert RobotLanguage.check_question(" a\t b ") == ("a b", "")
    assert RobotLanguage.check_question("", off()) == ("", "empty question")
    assert RobotLanguage.check_question("a", off()) == ("a", off())
    assert lang.figures()["questions_refused_deadline"] == 0 and lang.engine.submitted == []


def test_a_question_whose_answer_cannot_meet_its_deadline_is_refused_at_once_with_the_estimate():
    lang = language()
    assert refusal(lang, "done?") == ("cannot answer within 5 s: no frame is running "
                                      "(the first frame has not run yet)")
    lang.begin_frame(NO_FRAME)
    t = time.monotonic()
    message = refusal(lang, "done?", timeout_s=0.01, tokens=40)
    assert time.monotonic() - t < 0.1
    assert message.startswith("cannot answer within 0.01 s: about "), message
    assert "frame(s) of 0.10 s" in message and "behind 0 decoding and 0 waiting request(s)" in message
    assert lang.figures()["questions_refused_deadline"] == 2 and lang.figures()["questions_waiting"] == 0


def test_a_question_is_answered_through_the_door():
    lang = language()
    lang.begin_frame(NO_FRAME)
    got = {}
    caller = threading.Thread(target=lambda: got.update(answer=ask(lang, " done? ", tokens=99)))
    caller.start()
    while not lang.figures()["questions_waiting"]:
        time.sleep(0.001)
    lang.begin_frame(NO_FRAME)
    req = lang.engine.submitted[-1]
    assert (req.stream, req.max_new_tokens, req.prompt) == ("answer", 16, "(nothing yet) done?")   # capped to the engine's
    lang.finished(done(1, "answer", "yes"))
    caller.join(5.0)
    assert got == {"answer": "yes"}


def test_a_question_asked_while_the_robot_goes_away_fails_with_the_reason():
    lang = language()
    lang.begin_frame(NO_FRAME)
    calls = []

    def unavailable():           # available at the check, deactivated once the question is open
        calls.append(1)
        return "" if len(calls) == 1 else "the node is inactive, not active: activate it to ask questions"

    assert refusal(lang, "done?", unavailable=unavailable) == unavailable()
    assert lang.figures()["questions_failed"] == 1


def test_a_queued_question_is_refused_once_stalled_frames_cannot_finish_it():
    why = {"now": ""}
    lang = language(stalled=lambda: why["now"])
    lang.begin_frame(NO_FRAME)
    got = {}
    t0 = time.monotonic()

    def caller():
        try:
            ask(lang, "done?", timeout_s=0.6)
        except QuestionRefused as e:
            got["error"], got["after_s"] = str(e), time.monotonic() - t0

    thread = threading.Thread(target=caller)
    thread.start()
    while not lang.figures()["questions_waiting"]:
        time.sleep(0.001)
    why["now"] = "camera: stale"
    thread.join(5.0)
    assert got["error"].startswith("cannot answer within 0.6 s any more: no frame is running (camera: stale); "), got
    assert "(it was not started); at admission: about " in got["error"], got
    assert got["after_s"] < 0.6, got          # before the deadline
    assert lang.figures()["questions_waiting"] == 0    # withdrawn from the board
