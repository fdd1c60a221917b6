"""What one `oxygen serve` connection can cost the others: messages built to blow up when
decoded (a million empty arrays in 1 MB, a tree of many small ones) are refused by the
schema's msgpack limits at small memory, while another session keeps getting chunks;
strings over their cap are refused in the reply and the session goes on; a connection
beyond the sessions gets HTTP 503, beyond the connection cap it is dropped before its
handshake; an idle session is closed and its slot serves the next; the receive queue
holds at most two messages; an API key no client can send is refused at start.

Real websockets clients (test_serve.Client, openpi's behaviour) and the tiny engine, on
127.0.0.1. Speeds are not asserted here: scripts/serve_chaos.py measures them.
"""
import socket
import time
import tracemalloc

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidHandshake, InvalidStatus

from oxygen_ros.serving.wire import WireError, unpack

from test_serve import PROMPT, Client, Server, libero, serve_args

# one array header declaring a million elements, each an empty array: 1 MB on the wire
BOMB = b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1_000_000
# a map of 64 keys, each a list of 64 lists of 64 empty lists: within every per-container
# limit, 266k lists from 266 kB
TREE = b"\xde\x00\x40" + b"".join(b"\xa2k" + bytes([i]) + (b"\xdc\x00\x40" + (b"\xdc\x00\x40" + b"\x90" * 64) * 64)
                                  for i in range(64))


def _connect_when_free(url, tries=100):
    """A client, once a closed session's slot is back (503 until then)."""
    for _ in range(tries):
        try:
            return Client(url)
        except InvalidStatus as e:
            assert e.response.status_code == 503, e
        except (OSError, InvalidHandshake, ConnectionClosed):     # dropped over the connection cap
            pass
        time.sleep(0.1)
    raise AssertionError("no slot came back")


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.mark.parametrize("data", [BOMB, TREE], ids=["million-empty-arrays", "tree-of-lists"])
def test_a_decoding_bomb_is_refused_by_the_schema_limits_with_small_memory(data):
    from oxygen_ros.serving.robot_inputs import INPUTS, wire_limits

    limits = wire_limits(INPUTS["libero"], 32 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(WireError, match="max_array_len|arrays and maps"):
            unpack(data, limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) // 2, f"{peak} bytes to refuse a {len(data)}-byte message"
    obs = libero(0, **{"oxygen/ask": "what have you done?"})
    from oxygen_ros.serving.wire import pack
    back = unpack(pack(obs), limits)                  # a real observation still fits
    assert back["prompt"] == PROMPT and back["observation/image"].shape == (224, 224, 3)


def test_bombs_close_only_their_session_as_wire_errors(server):
    """Each bomb is a WireError naming the limit, then a 1011 close; the good session goes on."""
    good = Client(server.url)
    try:
        horizon = good.metadata["action_horizon"]
        good.infer(libero(0))
        for data in (BOMB, TREE, BOMB):
            bomber = Client(server.url)
            bomber.ws.send(data)
            message = bomber.ws.recv(timeout=60)
            assert isinstance(message, str) and message.startswith("WireError"), message[:300]
            assert "max_array_len" in message or "arrays and maps" in message, message[:300]
            with pytest.raises(ConnectionClosedError) as closed:
                bomber.ws.recv(timeout=30)
            assert closed.value.rcvd.code == 1011
            assert good.infer(libero(1))["actions"].shape == (horizon, 7)
    finally:
        good.close()


def test_strings_over_their_cap_are_refused_in_the_reply_and_the_session_goes_on(server):
    c = Client(server.url)
    try:
        horizon = c.metadata["action_horizon"]
        reply = c.infer(libero(1, **{"oxygen/narrate": "describe " * 500, "oxygen/remember": True,
                                     "oxygen/ask": "what have you done? " * 150, "oxygen/ask_timeout_s": 5.0}))
        assert reply["actions"].shape == (horizon, 7)          # the observation is still served
        requests = {r["stream"]: r for r in reply["oxygen/requests"]}
        assert set(requests) == {"narration", "memory", "answer"}, requests
        assert requests["narration"]["request_id"] == -1
        assert "oxygen/narrate" in requests["narration"]["error"] and "at most" in requests["narration"]["error"]
        assert requests["answer"]["request_id"] == -1
        assert "oxygen/ask" in requests["answer"]["error"] and "at most" in requests["answer"]["error"]
        assert requests["memory"]["request_id"] >= 0 and not requests["memory"]["error"]
        reply = c.infer(libero(2, prompt="pick up the cube " * 300))
        assert "actions" not in reply and "prompt" in reply["oxygen/error"] and "at most" in reply["oxygen/error"]
        assert c.infer(libero(3))["actions"].shape == (horizon, 7)     # the same session goes on
    finally:
        c.close()


def test_a_connection_beyond_the_sessions_gets_http_503_before_it_opens():
    s = Server(max_sessions=1)
    try:
        first = Client(s.url)
        assert first.infer(libero(0))["actions"].shape[1] == 7
        with pytest.raises(InvalidStatus) as refused:
            Client(s.url)
        assert refused.value.response.status_code == 503
        assert b"--max-sessions" in refused.value.response.body
        assert first.infer(libero(1))["actions"].shape[1] == 7
        first.close()
        second = _connect_when_free(s.url)            # the slot comes back
        assert second.infer(libero(2))["actions"].shape[1] == 7
        second.close()
    finally:
        s.close()


def test_a_handshake_that_fails_after_its_session_was_taken_gives_it_back():
    """The session is taken in process_request; a request that is then no websocket (plain
    HTTP: 426) never reaches the handler, and its connection's end releases the session."""
    import urllib.error
    import urllib.request

    s = Server(max_sessions=1)
    try:
        port = s.url.rsplit(":", 1)[1]
        for _ in range(3):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
            assert refused.value.code in (426, 503)     # 503: the last one's slot not reaped yet
            refused.value.close()
        good = _connect_when_free(s.url)
        assert good.infer(libero(0))["actions"].shape[1] == 7
        good.close()
    finally:
        s.close()


def test_an_idle_session_is_closed_and_its_slot_serves_the_next():
    s = Server(max_sessions=1, idle_timeout=1.0)
    try:
        idle = Client(s.url)            # holds the only session, sends nothing
        with pytest.raises(ConnectionClosed) as closed:
            idle.ws.recv(timeout=20)
        assert closed.value.rcvd.code == 1000 and "idle" in closed.value.rcvd.reason
        good = _connect_when_free(s.url)
        for i in range(3):
            assert good.infer(libero(i))["actions"].shape[1] == 7
        good.close()
    finally:
        s.close()


def test_connections_over_the_cap_are_dropped_before_their_handshake():
    s = Server(max_sessions=1, max_connections=2)
    port = int(s.url.rsplit(":", 1)[1])
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]   # never handshake
    try:
        with pytest.raises((OSError, InvalidHandshake, ConnectionClosed)):    # reset: where the client was
            Client(s.url)
    finally:
        for sock in held:
            sock.close()
    try:
        good = _connect_when_free(s.url)
        assert good.infer(libero(0))["actions"].shape[1] == 7
        good.close()
    finally:
        s.close()


def test_a_connection_reads_at_most_two_messages_ahead(server):
    """websockets' default queue (16 messages of up to --max-message-mb each) is cut to 2: a
    pipelining client is held by TCP, not by the server's memory."""
    c = Client(server.url)
    try:
        c.infer(libero(0))
        assert [conn.max_queue_high for conn in server.server.open_connections] == [2]
    finally:
        c.close()


@pytest.mark.parametrize("key", ["clé", "ключ", "tab\tkey", " padded"])
def test_an_api_key_no_client_can_send_is_refused_at_start(key):
    from oxygen_ros.commands.serve import build

    with pytest.raises(ValueError, match="printable ASCII"):
        build(serve_args(api_key=key), log=lambda line: None)


def test_binding_off_loopback_without_a_key_warns():
    from oxygen_ros.serving.server import exposure_warning

    assert "without an API key" in exposure_warning("0.0.0.0", "")
    assert "without an API key" in exposure_warning("robot-server.lan", "")
    for host, key in (("127.0.0.1", ""), ("::1", ""), ("localhost", ""), ("0.0.0.0", "s3cret")):
        assert exposure_warning(host, key) == "", (host, key)
