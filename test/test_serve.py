"""`oxygen serve` driven by a client that follows openpi's websocket client (written here from
the protocol: openpi is not installable): metadata on connect, one msgpack observation per
message, one reply with `actions`; errors come as a text message, then a 1011 close.

The server runs in this process (so its engine can be compared with the engine's own
output) on port 0 of 127.0.0.1; one test starts the real `oxygen serve` command.
"""
import asyncio
import os
import subprocess
import sys
import threading
import urllib.request
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import torch
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect

from oxygen_ros.serving.wire import WireError, pack, unpack

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "pick up the red cube"


def serve_args(**kw) -> Namespace:
    args = dict(model="tiny", checkpoint=None, inputs="libero", host="127.0.0.1", port=0, api_key="",
                max_sessions=4, window_ms=50.0, max_message_mb=8.0, steps_per_frame=4, max_tokens=12,
                max_requests=8, question_timeout=60.0, seed=0, dtype="float32", device="cpu",
                idle_timeout=30.0, max_connections=0)
    return Namespace(**{**args, **kw})


class Server:
    """`oxygen serve`'s hub and server in a thread of this process."""

    def __init__(self, **kw):
        from oxygen_ros.commands.serve import build

        self.hub, self.server = build(serve_args(**kw), log=lambda line: None)
        self.hub.start()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "the server did not start"

    async def _main(self):
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        await self.server.run("127.0.0.1", 0, ready=self._bound, stop=self._stop)

    def _bound(self, port):
        self.url = f"ws://127.0.0.1:{port}"
        self._ready.set()

    def close(self):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self.hub.stop()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


class Client:
    """openpi's client behaviour: connect, read the metadata, then infer() per observation."""

    def __init__(self, url, headers=None):
        self._connection = connect(url, max_size=None, compression=None, additional_headers=headers,
                                   open_timeout=20)
        self.ws = self._connection.__enter__()
        self.metadata = unpack(self.ws.recv(timeout=20))

    def infer(self, obs: dict) -> dict:
        self.ws.send(pack(obs))
        reply = self.ws.recv(timeout=60)
        if isinstance(reply, str):
            raise RuntimeError(f"error from the server:\n{reply}")
        return unpack(reply)

    def close(self):
        self._connection.__exit__(None, None, None)


def libero(seed: int, **extra) -> dict:
    rng = np.random.default_rng(seed)
    return {"observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
            "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
            "observation/state": rng.uniform(-1, 1, 8), "prompt": PROMPT, **extra}


def alone(hub, observations: list[dict]) -> list[np.ndarray]:
    """The engine's own chunks for these observations, one robot, the session's noise."""
    from oxygen_ros.engine.observation.observation import Observation
    from oxygen_ros.engine.scheduler import OxygenEngine

    engine = OxygenEngine(hub.model, hub.tok, hub.engine.config)
    e = hub.model.cfg.expert
    gen = torch.Generator().manual_seed(hub.seed)
    slots = hub.model.cfg.camera_slots
    out = []
    for o in observations:
        obs = Observation(images={slots[0]: o["observation/image"], slots[1]: o["observation/wrist_image"]},
                          state=o["observation/state"], instruction=o["prompt"])
        out.append(engine.step(obs, noise=torch.randn(e.horizon, e.action_dim, generator=gen)).actions[:, :7])
    return out


def test_wire_round_trips_numpy_and_refuses_what_is_malformed():
    msg = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.int64(7), "t": "x", "n": [1, {"b": 2.5}]}
    back = unpack(pack(msg))
    assert back["a"].dtype == np.float32 and back["a"].shape == (2, 3) and back["a"].tolist() == msg["a"].tolist()
    assert back["s"] == 7 and back["s"].dtype == np.int64 and back["n"] == [1, {"b": 2.5}]
    import msgpack

    bad = {"truncated": pack(msg)[:-4], "extra bytes": pack(msg) + b"\x00", "text": "hello",
           "too deep": b"\x91" * 100_000 + b"\xc0",
           "lying shape": msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "<f4",
                                         b"shape": [1 << 30, 1 << 30]}),
           "object dtype": msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O",
                                          b"shape": [1]})}
    for what, data in bad.items():
        with pytest.raises(WireError):
            unpack(data)
            pytest.fail(what)
    with pytest.raises(WireError):
        pack({"a": np.zeros(2, complex)})


def test_metadata_then_chunks_equal_to_the_engines_own(server):
    c = Client(server.url)
    try:
        assert c.metadata["inputs"] == "libero" and c.metadata["action_dims"] == 7
        assert c.metadata["observation_keys"] == ["observation/image", "observation/wrist_image",
                                                  "observation/state", "prompt"]
        assert "oxygen/ask" in c.metadata["extensions"]["language"]["request_keys"]
        observations = [libero(i) for i in range(3)]
        replies = [c.infer(o) for o in observations]
    finally:
        c.close()
    horizon = server.hub.model.cfg.expert.horizon
    for reply, expected in zip(replies, alone(server.hub, observations)):
        assert reply["actions"].shape == (horizon, 7)
        np.testing.assert_allclose(reply["actions"], expected, atol=1e-5)
        assert reply["server_timing"]["infer_ms"] > 0
    assert "prev_total_ms" not in replies[0]["server_timing"] and replies[1]["server_timing"]["prev_total_ms"] > 0


def test_two_sessions_are_batched_and_each_equals_itself_alone(server):
    observations = {k: [libero(10 * k + i) for i in range(4)] for k in (1, 2)}
    replies = {}

    def run(k):
        c = Client(server.url)
        try:
            replies[k] = [c.infer(o) for o in observations[k]]
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(replies) == {1, 2}
    assert server.hub.frames < 8, f"{server.hub.frames} frames for 2 x 4 observations: not batched"
    for k in (1, 2):
        for reply, expected in zip(replies[k], alone(server.hub, observations[k])):
            np.testing.assert_allclose(reply["actions"], expected, atol=1e-5)


def test_a_question_on_the_wire_is_answered_on_later_replies(server):
    c = Client(server.url)
    try:
        first = c.infer(libero(0, **{"oxygen/remember": True}))
        assert first["oxygen/requests"][0]["stream"] == "memory" and first["oxygen/requests"][0]["request_id"] >= 0
        texts = []
        asked = None
        for i in range(1, 40):
            extra = {"oxygen/ask": "what have you done?"} if i == 6 else {}
            reply = c.infer(libero(i, **extra))
            if extra:
                asked = reply["oxygen/requests"][0]
                assert asked["stream"] == "answer" and not asked["error"], asked
            texts += reply["oxygen/text"]
            if asked and any(t["request_id"] == asked["request_id"] and t["done"] for t in texts):
                break
    finally:
        c.close()
    memory = [t for t in texts if t["stream"] == "memory"]
    answer = [t for t in texts if asked and t["request_id"] == asked["request_id"]]
    assert memory and memory[-1]["done"] and memory[-1]["full_text"]
    assert answer and answer[-1]["done"] and not answer[-1]["error"], answer
    # the deltas joined give the full text, with the same meaning as the ROS topics
    assert "".join(t["delta"] for t in answer) == answer[-1]["full_text"]


def test_bad_messages_and_keys_close_only_their_session(server):
    """Malformed msgpack, a missing key, a misshapen state: each gets its error string and a
    1011 close, while another session keeps getting chunks."""
    good = Client(server.url)
    try:
        good.infer(libero(0))
        for bad in (b"\x93\x01", pack({"observation/image": np.zeros((224, 224, 3), np.uint8), "prompt": PROMPT}),
                    pack(libero(1, **{"observation/state": np.zeros(3)}))):
            c = Client(server.url)
            c.ws.send(bad)
            message = c.ws.recv(timeout=30)
            assert isinstance(message, str) and message, message
            with pytest.raises(ConnectionClosedError) as closed:
                c.ws.recv(timeout=30)
            assert closed.value.rcvd.code == 1011
            assert good.infer(libero(2))["actions"].shape[1] == 7      # the other session goes on
    finally:
        good.close()


def test_errors_name_the_missing_or_misshapen_key(server):
    for obs, named in ((libero(0, **{"observation/state": np.zeros(3)}), "observation/state"),
                       ({k: v for k, v in libero(0).items() if k != "observation/wrist_image"},
                        "observation/wrist_image")):
        c = Client(server.url)
        c.ws.send(pack(obs))
        assert named in c.ws.recv(timeout=30)
        c.close()


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_hostile_messages_each_close_only_their_session():
    """Property (hypothesis, bounded): random bytes, truncated observations, nested bombs, giant
    array declarations and observations with keys dropped or replaced by anything each get
    either a reply with the chunk or an error string and a 1011 close; a message over the size
    limit is closed 1009 by the websocket layer; meanwhile another session keeps getting
    chunks and the server's memory stays bounded."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from hostile_inputs import HOSTILE_WIRE, observations

    s = Server(max_message_mb=1.0)
    good = Client(s.url)
    horizon = good.metadata["action_horizon"]
    replies, errors = [], []
    try:
        good.infer(libero(0))
        rss0 = _rss_mb()

        @settings(max_examples=40, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(st.one_of(HOSTILE_WIRE.map(lambda kd: kd[1]), observations().map(pack)))
        def one(data):
            c = Client(s.url)
            try:
                c.ws.send(data)
                message = c.ws.recv(timeout=30)
                if isinstance(message, str):
                    assert message.split(":", 1)[0] in ("WireError", "InputError"), message
                    errors.append(message)
                    with pytest.raises(ConnectionClosedError) as closed:
                        c.ws.recv(timeout=30)
                    assert closed.value.rcvd.code == 1011
                else:
                    assert unpack(message)["actions"].shape == (horizon, 7)
                    replies.append(message)
            finally:
                c.close()
            assert good.infer(libero(1))["actions"].shape == (horizon, 7)     # the other session goes on

        one()
        big = Client(s.url)
        big.ws.send(pack(libero(2, **{"observation/image": np.zeros((1024, 1024, 3), np.uint8)})))
        with pytest.raises(ConnectionClosedError) as closed:
            big.ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1009                          # message too big
        assert good.infer(libero(3))["actions"].shape == (horizon, 7)
        assert len(errors) + len(replies) >= 40 and errors, (len(errors), len(replies))
        assert _rss_mb() - rss0 < 100, (rss0, _rss_mb())
    finally:
        good.close()
        s.close()


def test_api_key_and_healthz():
    """Without the key or with a wrong one: 401 before the websocket opens, while a session
    with the key keeps getting chunks; /healthz needs no key."""
    s = Server(api_key="s3cret")
    try:
        port = s.url.rsplit(":", 1)[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert r.status == 200 and r.read() == b"OK\n"
        good = Client(s.url, headers={"Authorization": "Api-Key s3cret"})
        assert good.infer(libero(0))["actions"].shape[1] == 7
        for headers in ({"Authorization": "Api-Key wrong"}, None):
            with pytest.raises(InvalidStatus) as refused:
                Client(s.url, headers=headers)
            assert refused.value.response.status_code == 401
            assert good.infer(libero(1))["actions"].shape[1] == 7
        good.close()
    finally:
        s.close()


def test_oxygen_serve_command_serves_and_stops_on_ctrl_c():
    env = {**os.environ, "OXYGEN_API_KEY": ""}
    proc = subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "serve", "--model", "tiny", "--inputs", "libero",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT, env=env)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "listening on ws://" in line:
                break
        url = lines[-1].split("listening on ")[1].split()[0]
        assert url.startswith("ws://127.0.0.1:"), lines
        c = Client(url)
        assert c.infer(libero(0))["actions"].shape == (c.metadata["action_horizon"], 7)
        c.close()
        proc.send_signal(2)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(lines) + rest
    assert "stopped after" in rest


def test_serve_refuses_what_it_cannot_serve():
    from oxygen_ros.commands.serve import build

    with pytest.raises(ValueError, match="--inputs"):
        build(serve_args(inputs=None), log=lambda line: None)
