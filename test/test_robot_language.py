"""RobotLanguage (engine/robot_language.py), one robot's language life that the node and
`oxygen serve` both drive, without ROS or a model: a stream starts only when its turn comes
and its last request finished; a finished memory entry joins the log and the next answer
prompt; a board question reaches the engine at the frame's start and its caller wakes with
the answer; an answer started at once carries a deadline, and expires past it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from oxygen_ros.engine.admission import Backlog
from oxygen_ros.engine.requests import RequestRejected, TextDelta
from oxygen_ros.engine.robot_language import RobotLanguage

SETTINGS = {"narration_every_n_frames": 1, "narration_prompt": "say", "narration_max_tokens": 8,
            "memory_every_n_frames": 2, "memory_prompt": "note", "memory_max_tokens": 99}


class FakeEngine:
    """The surface RobotLanguage uses: submit, backlog, config, frame_index."""

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


def done(rid: int, stream: str, text: str = "", error: str = "") -> TextDelta:
    return TextDelta(request_id=rid, stream=stream, start_frame=0, delta="", token_count=0, done=True,
                     full_text=text, error=error)


def language(engine=None, **kw) -> RobotLanguage:
    return RobotLanguage(engine or FakeEngine(), lambda s: len(s.split()), 200, memory_log_size=2,
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
