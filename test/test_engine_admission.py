"""The admission estimate (engine/admission.py) replays the scheduler: a request's frames to
its last token, predicted from the backlog before it is submitted, equal the frames the
engine really takes when every request runs to its max_new_tokens (ignore_eos)."""
import pytest

from engine_fixtures import observation, tiny
from oxygen_ros.engine.admission import Backlog, frames_to_finish
from oxygen_ros.engine.requests import LanguageRequest
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine


def test_hand_computed_cases():
    idle = Backlog(live=(), queued=(), slots=2, steps_per_frame=4)
    assert frames_to_finish(idle, 1) == 1            # the admit token is the last
    assert frames_to_finish(idle, 5) == 1            # 1 at admission + 4 decode steps
    assert frames_to_finish(idle, 6) == 2
    # both slots busy for 2 more frames (8 tokens at k=4): ours is admitted in frame 3
    busy = Backlog(live=(8, 3), queued=(), slots=2, steps_per_frame=4)
    assert frames_to_finish(busy, 5) == 2            # the 3-token one leaves after frame 1
    assert frames_to_finish(Backlog(live=(8, 8), queued=(), slots=2, steps_per_frame=4), 5) == 3
    # behind the queue and behind requests the engine has not seen yet
    assert frames_to_finish(Backlog((), (5, 5), 1, 4), 5) == 3
    assert frames_to_finish(Backlog((), (5,), 1, 4), 5, ahead=(5,)) == 3
    with pytest.raises(ValueError):
        frames_to_finish(idle, 0)


@pytest.mark.parametrize("slots,k", [(2, 1), (3, 4)])
def test_the_estimate_equals_the_engines_frames(slots, k):
    model, tok = tiny()
    eng = OxygenEngine(model, tok, EngineConfig(max_requests=slots, max_queue=16, max_new_tokens=24,
                                                steps_per_frame=k))
    for n in (7, 12, 3, 9):         # a backlog: some live, some queued
        eng.submit(LanguageRequest("narrate", max_new_tokens=n, ignore_eos=True))
    eng.step(observation(0))
    predicted = frames_to_finish(eng.backlog(), 10, ahead=(6,))
    eng.submit(LanguageRequest("ahead", max_new_tokens=6, ignore_eos=True))
    ours = eng.submit(LanguageRequest("what have you done?", stream="answer", max_new_tokens=10,
                                      ignore_eos=True))
    for frame in range(1, 50):
        deltas = eng.step(observation(frame)).deltas
        if any(d.request_id == ours and d.done for d in deltas):
            break
    assert frame == predicted


def test_requests_the_running_frame_did_not_take_wait_for_the_next():
    idle = Backlog(live=(), queued=(), slots=2, steps_per_frame=4)
    assert frames_to_finish(idle, 5, admit_from=2) == 2
    # the queue the running frame took is admitted in frame 1 all the same
    b = Backlog(live=(), queued=(5,), slots=1, steps_per_frame=4)
    assert frames_to_finish(b, 5, admit_from=2) == 2
    assert frames_to_finish(b, 5, ahead=(5,), admit_from=2) == 3
