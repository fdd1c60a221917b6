"""`oxygen serve` under faults and abandoned work (issue 42, items 4 and 5): a failure in one
session's policy I/O closes that session alone (openpi's convention: the traceback as a text
message, then close 1011) while the others of its batch get their chunks and the engine
keeps serving; a session that goes, or a question that expires, gives its KV slots and its
routes back at once.

The server runs in this process (test_serve.Server: the real hub, engine with the `tiny`
profile and websocket server); clients are real websocket clients.
"""
import time

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosedError

from oxygen_ros.serving.policy_adapters import AsGiven
from oxygen_ros.serving.wire import pack, unpack
from test_serve import Client, Server, libero

POISON = 7.0       # a state value that this test's policy I/O fails on
BAD_PROMPT = 8.0   # a state value for which it hands the engine an observation without a prompt


class PolicyIOWithABug(AsGiven):
    """The as-given policy I/O with bugs that only one robot's state reaches (a KeyError,
    not the ValueError the policy I/O's own checks raise; an observation whose instruction is
    None): stands for a checkpoint's transforms that break on one robot's data."""

    def observation(self, images, state, prompt):
        obs = super().observation(images, state, prompt)
        if state[0] == BAD_PROMPT:
            obs.instruction = None
        return obs

    def actions(self, chunk, state):
        if state[0] == POISON:
            raise KeyError("norm_stats['actions']")
        return super().actions(chunk, state)


def owners(hub) -> set:
    """The robots that hold a KV slot now, and those the hub routes text to."""
    engine = hub.engine
    return ({engine.owner[lv.req.request_id] for lv in engine.core.live},
            {s.robot for s in hub._owner.values()})


def wait_until(condition, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_one_sessions_policy_io_failure_closes_that_session_only():
    """Two sessions in one frame (the window waits for both); one's policy I/O raises on its
    chunk: that session gets the traceback as text and a 1011 close, the other gets its
    chunk in the same frame and every later one, the engine has no frame left open, and a
    new session is served."""
    s = Server(window_ms=5000.0)
    s.hub.adapter = PolicyIOWithABug()
    good, bad = Client(s.url), Client(s.url)
    try:
        poisoned = libero(1, **{"observation/state": np.array([POISON] + [0.0] * 7)})
        bad.ws.send(pack(poisoned))
        good.ws.send(pack(libero(2)))
        reply = good.ws.recv(timeout=60)
        assert not isinstance(reply, str), f"the good session got an error: {reply}"
        assert unpack(reply)["actions"].shape[1] == 7
        message = bad.ws.recv(timeout=60)
        assert isinstance(message, str) and "Traceback" in message and "norm_stats" in message, message
        with pytest.raises(ConnectionClosedError) as closed:
            bad.ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1011
        # the frame is counted after its language work, which follows the replies
        assert wait_until(lambda: s.hub.frames >= 1) and s.hub.engine._open is None
        time.sleep(0.2)
        assert s.hub.frames == 1, "both observations were one frame"
        for i in range(3, 6):
            assert good.infer(libero(i))["actions"].shape[1] == 7
        late = Client(s.url)
        assert late.infer(libero(9))["actions"].shape[1] == 7
        late.close()
    finally:
        good.close()
        bad.close()
        s.close()


def test_an_observation_the_engine_fails_on_fails_its_session_only():
    """An observation that makes the engine raise while building that robot's prefix (not an
    ObservationError: here an AttributeError from a policy I/O's bad observation) leaves that
    robot out of the frame, as an unusable observation is: its session gets the reason and a
    1011 close, the other session of the frame gets its chunk."""
    s = Server(window_ms=5000.0)
    s.hub.adapter = PolicyIOWithABug()
    good, bad = Client(s.url), Client(s.url)
    try:
        bad.ws.send(pack(libero(1, **{"observation/state": np.array([BAD_PROMPT] + [0.0] * 7)})))
        good.ws.send(pack(libero(2)))
        reply = good.ws.recv(timeout=60)
        assert not isinstance(reply, str), f"the good session got an error: {reply}"
        message = bad.ws.recv(timeout=60)
        assert isinstance(message, str) and "AttributeError" in message, message
        with pytest.raises(ConnectionClosedError) as closed:
            bad.ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1011
        assert wait_until(lambda: s.hub.frames >= 1)
        time.sleep(0.2)
        assert s.hub.frames == 1, "both observations were one frame"
        assert good.infer(libero(3))["actions"].shape[1] == 7
    finally:
        good.close()
        bad.close()
        s.close()


def test_after_a_failed_frame_the_engine_serves_the_next_session():
    """A session alone in its frame whose policy I/O raises after the chunk: the frame is
    still finished (no frame left open), so the next session's observation gets its chunk,
    not "act() called twice"."""
    s = Server()
    s.hub.adapter = PolicyIOWithABug()
    try:
        bad = Client(s.url)
        bad.ws.send(pack(libero(1, **{"observation/state": np.array([POISON] + [0.0] * 7)})))
        assert "Traceback" in bad.ws.recv(timeout=60)
        bad.close()
        assert wait_until(lambda: s.hub.engine._open is None, 10), "the failed frame was left open"
        c = Client(s.url)
        reply = c.ws.send(pack(libero(2))) or c.ws.recv(timeout=60)
        assert not isinstance(reply, str), reply
        assert unpack(reply)["actions"].shape[1] == 7
        c.close()
    finally:
        s.close()


def test_sessions_that_leave_mid_question_give_back_their_slots_and_routes():
    """Clients that ask, narrate and remember, then disconnect with their text undecoded:
    once the engine thread has reaped them, the KV slots and the hub's text routes are those
    of the session still open, and a new session that reuses a gone one's name holds
    nothing. (1 decode step a frame and 40 tokens a request: abandoned work would otherwise
    hold its slots for 40 frames.)"""
    s = Server(steps_per_frame=1, max_tokens=40, max_requests=8, window_ms=5.0)
    hub = s.hub
    good = Client(s.url)
    try:
        started = good.infer(libero(0, **{"oxygen/narrate": True}))["oxygen/requests"]
        assert started[0]["request_id"] > 0
        keeper = next(x.robot for x in hub._sessions.values() if not x.closed)
        gone = set()
        for k in range(3):
            c = Client(s.url)
            reply = c.infer(libero(10 + k, **{"oxygen/narrate": True, "oxygen/remember": True,
                                             "oxygen/ask": "what have you done?"}))
            assert all(r["request_id"] > 0 for r in reply["oxygen/requests"]), reply["oxygen/requests"]
            gone |= {x.robot for x in hub._sessions.values() if x.robot != keeper}
            c.close()
        for i in range(1, 4):       # frames after the disconnects: the engine thread reaps
            good.infer(libero(i))
        assert wait_until(lambda: hub.sessions == 1)
        slots, routes = owners(hub)
        assert slots == {keeper} and routes == {keeper}, (slots, routes)
        assert hub.engine.core.pool.live == len(hub.engine.core.live)
        assert set(hub.engine.queues) <= {keeper}, hub.engine.queues
        assert set(hub.engine.owner.values()) == {keeper}
        again = Client(s.url)
        robot = next(x.robot for x in hub._sessions.values() if x.robot != keeper and not x.closed)
        assert robot in gone, "the new session reuses a gone one's name"
        assert hub.engine.live_requests(robot) == 0
        assert again.infer(libero(20))["actions"].shape[1] == 7
        again.close()
    finally:
        good.close()
        s.close()


def test_an_expired_question_frees_its_slot():
    """A question past its deadline ends with the timeout error on the next reply, and its
    request is gone from the engine at once (no slot, no queue entry, no route)."""
    s = Server(steps_per_frame=1, max_tokens=40, window_ms=5.0)
    hub = s.hub
    c = Client(s.url)
    try:
        asked = c.infer(libero(0, **{"oxygen/ask": "what have you done?", "oxygen/ask_timeout_s": 0.05}))
        rid = asked["oxygen/requests"][0]["request_id"]
        assert rid > 0, asked
        texts = []
        for i in range(1, 30):
            time.sleep(0.02)
            texts += c.infer(libero(i))["oxygen/text"]
            if any(t["request_id"] == rid and t["done"] for t in texts):
                break
        done = [t for t in texts if t["request_id"] == rid and t["done"]]
        assert done and done[0]["error"] == "not answered within its timeout", texts
        assert rid not in hub.engine.owner and rid not in hub._owner
        assert all(lv.req.request_id != rid for lv in hub.engine.core.live)
        assert hub.engine.core.pool.live == len(hub.engine.core.live) == 0
    finally:
        c.close()
        s.close()
