"""`oxygen serve` under faults (issue 42, item 4): a failure in one session's policy I/O
closes that session alone (openpi's convention: the traceback as a text message, then close
1011) while the others of its batch get their chunks and the engine keeps serving.

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


class PolicyIOWithABug(AsGiven):
    """The as-given policy I/O with a bug that only one robot's state reaches (a KeyError,
    not the ValueError the policy I/O's own checks raise): stands for a checkpoint's output
    transform that breaks on one robot's data."""

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
        good.infer(libero(0))          # alone in its frame? no: both are open, so the window waits
        frames = s.hub.frames
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
        assert s.hub.frames == frames + 1, "both observations were one frame"
        assert s.hub.engine._open is None
        for i in range(3, 6):
            assert good.infer(libero(i))["actions"].shape[1] == 7
        late = Client(s.url)
        assert late.infer(libero(9))["actions"].shape[1] == 7
        late.close()
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
        assert s.hub.engine._open is None
        c = Client(s.url)
        reply = c.ws.send(pack(libero(2))) or c.ws.recv(timeout=60)
        assert not isinstance(reply, str), reply
        assert unpack(reply)["actions"].shape[1] == 7
        c.close()
    finally:
        s.close()
