"""The websocket server of `oxygen serve`, on openpi's protocol.

On connect the server sends its metadata (one msgpack message); then each client message is
one observation and each reply one dict with `actions` and `server_timing` (`infer_ms`, and
`prev_total_ms` from the second reply on), plus the language extension's keys
(sessions.py). A message that cannot be used gets the reason as a text message, and that
connection alone is closed with code 1011, as openpi's server does with its traceback;
every other session goes on. A string over its cap (robot_inputs.STRING_CAPS) is refused in
the reply instead and the session goes on: a language key in `oxygen/requests`, a `prompt`
as a reply with `oxygen/error` and no actions. GET /healthz answers 200 "OK". With an API
key, a connection without the header `Authorization: Api-Key <key>` is refused with 401
before it opens; with every session taken, 503.

What one connection can hold: one message being handled and at most `MAX_QUEUE` more
received (the socket is not read further), at most `max_message_bytes` each; decoding and
repacking run in a worker thread with the schema's msgpack limits, so the event loop (every
session's replies) never waits on one message. Connections beyond `max_connections` are
dropped as they are accepted, before any handshake; a session that neither sends nor reads
for `idle_timeout_s` is closed, so idle key holders cannot keep the others out.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import ipaddress
import math
import time
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from .robot_inputs import PROMPT_KEY, InputError, over_cap, wire_limits
from .sessions import ASK_KEY, ASK_TIMEOUT_KEY, STREAM_KEYS, ServerFull, SessionHub
from .wire import WireError, pack, unpack

ERROR_CLOSE_REASON = "Internal server error. Traceback included in previous frame."
MAX_QUEUE = 2                    # messages received ahead of the one being handled
IDLE_CLOSE_CODE = 1000
REFUSAL_LOG_S = 5.0
_STREAM_ORDER = [*STREAM_KEYS, "answer"]


def check_api_key(api_key: str) -> None:
    """ValueError for a key no client could send: HTTP header values are read as latin-1,
    so anything but printable ASCII would never match."""
    if api_key and not (api_key.isascii() and api_key.isprintable() and api_key == api_key.strip()):
        raise ValueError("the API key must be printable ASCII without leading or trailing spaces "
                         "(HTTP headers cannot carry anything else as the same bytes)")


def exposure_warning(host: str, api_key: str) -> str:
    """A warning when `host` is reachable from other machines and no key is required ("" if not)."""
    if api_key:
        return ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:          # a host name: assume it is reachable
        loopback = False
    if loopback:
        return ""
    return (f"WARNING: listening on {host} without an API key: anyone who can reach this port can "
            "send observations and hold sessions; set OXYGEN_API_KEY (and put TLS in front)")


class OpenpiServer:
    def __init__(self, hub: SessionHub, inputs, metadata: dict, api_key: str = "",
                 max_message_bytes: int = 32 << 20, log=print, idle_timeout_s: float = 30.0,
                 max_connections: int = 0):
        """idle_timeout_s: 0 never closes an idle session; max_connections: TCP connections
        at once, handshakes included (0: four per session)."""
        check_api_key(api_key)
        self.hub, self.inputs, self.metadata = hub, inputs, metadata
        self.api_key, self.max_message_bytes, self.log = api_key, max_message_bytes, log
        self.idle_timeout_s = idle_timeout_s or None
        self.max_connections = max_connections or 4 * hub.max_sessions
        self.limits = wire_limits(inputs, max_message_bytes)
        # one worker a session: a session has one message in hand at a time, so none waits
        # behind another's decoding
        self._workers = concurrent.futures.ThreadPoolExecutor(hub.max_sessions, "oxygen_serve_decode")
        self._reserved: dict[ServerConnection, object] = {}    # connection -> its session
        self.open_connections: set[ServerConnection] = set()
        self.connections = 0          # TCP connections now, handshakes included
        self.dropped = 0              # connections dropped over max_connections
        self._refusal_log: dict[str, tuple[float, int]] = {}   # kind -> (last logged, not logged since)

    # -- before the websocket opens ----------------------------------------------------------
    def _connection_class(self):
        server = self

        class Counted(ServerConnection):
            """Counts TCP connections; one over the cap is dropped before its handshake."""

            def connection_made(self, transport):
                super().connection_made(transport)
                server.open_connections.add(self)
                server.connections += 1
                if server.connections > server.max_connections:
                    server.dropped += 1
                    server._refused("dropped", f"dropped a connection over --max-connections "
                                               f"({server.max_connections})")
                    transport.abort()

            def connection_lost(self, exc):
                self.lost = True
                server.open_connections.discard(self)
                server.connections -= 1
                server._release(self)       # a session reserved for a handshake that failed
                super().connection_lost(exc)

        return Counted

    async def _check_request(self, connection, request):
        if request.path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if self.api_key:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Api-Key {self.api_key}".encode()):
                self._refused("401", f"refused a connection from {connection.remote_address}: "
                                     "wrong or missing API key")
                return connection.respond(HTTPStatus.UNAUTHORIZED, "wrong or missing API key\n")
        try:   # the session is taken before the websocket opens, so "full" is an HTTP answer
            if self.hub.sessions >= self.hub.max_sessions:      # every one open: no thread hop to say so
                raise ServerFull(f"the server serves at most {self.hub.max_sessions} sessions at once "
                                 "(--max-sessions)")
            session = await asyncio.to_thread(self.hub.open, self.inputs)
        except ServerFull as e:
            self._refused("503", f"refused a connection from {connection.remote_address}: {e}")
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, f"{e}\n")
        if getattr(connection, "lost", False):     # it went while the session was being opened
            self.hub.close(session)
            return None
        self._reserved[connection] = session
        return None

    def _refused(self, kind: str, line: str) -> None:
        """Log a refusal, at most one line of a kind every REFUSAL_LOG_S (a flood stays out of the log)."""
        now, (last, skipped) = time.monotonic(), self._refusal_log.get(kind, (-math.inf, 0))
        if now - last < REFUSAL_LOG_S:
            self._refusal_log[kind] = (last, skipped + 1)
            return
        self._refusal_log[kind] = (now, 0)
        self.log(line + (f" (and {skipped} more since the last such line)" if skipped else ""))

    def _check_response(self, connection, request, response):
        if response.status_code != HTTPStatus.SWITCHING_PROTOCOLS:
            self._release(connection)      # no websocket after all (401, 426 ...): its session back now
        return None

    def _release(self, connection) -> None:
        """A session reserved for a handshake whose connection went before its handler ran."""
        session = self._reserved.pop(connection, None)
        if session is not None:
            self.hub.close(session)

    # -- one message -------------------------------------------------------------------------
    def _prepare(self, session, data):
        """In a worker: (the reply's future, refusals) or ({"oxygen/error": why}, []) for a
        prompt over its cap. WireError or InputError for a message that cannot be used."""
        message = unpack(data, self.limits)
        if not isinstance(message, dict):
            raise InputError(f"an observation must be a map, got {type(message).__name__}")
        why = over_cap(PROMPT_KEY, message.get(PROMPT_KEY))
        if why:
            return {"oxygen/error": why, "server_timing": {"infer_ms": 0.0}}, []
        refused = []
        for stream, key in [*STREAM_KEYS.items(), ("answer", ASK_KEY)]:
            why = over_cap(key, message.get(key))
            if why:          # this request refused; the observation is still served
                refused.append({"stream": stream, "request_id": -1, "error": why})
                drop = {key, ASK_TIMEOUT_KEY} if key == ASK_KEY else {key}
                message = {k: v for k, v in message.items() if k not in drop}
        return self.hub.submit(session, message), refused

    async def _timed(self, awaitable):
        async with asyncio.timeout(self.idle_timeout_s):
            return await awaitable

    async def _session(self, ws) -> None:
        session = self._reserved.pop(ws, None)
        if session is None:       # its connection already went (connection_lost closed it)
            return
        self.log(f"session {session.robot} opened ({ws.remote_address}); {self.hub.sessions} open")
        loop = asyncio.get_running_loop()
        try:
            await self._timed(ws.send(pack(self.metadata)))
            prev_total_ms = None
            while True:
                try:
                    data = await self._timed(ws.recv())
                except ConnectionClosed:
                    break
                start = time.monotonic()
                try:
                    pending, refused = await loop.run_in_executor(self._workers, self._prepare, session, data)
                    reply = pending if isinstance(pending, dict) else await asyncio.wrap_future(pending)
                except (WireError, InputError, RuntimeError) as e:   # RuntimeError: the frame failed
                    self.log(f"session {session.robot}: {e}")
                    await self._timed(ws.send(f"{type(e).__name__}: {e}"))
                    await ws.close(1011, ERROR_CLOSE_REASON)
                    break
                if refused:
                    reply["oxygen/requests"] = sorted(refused + reply["oxygen/requests"],
                                                      key=lambda r: _STREAM_ORDER.index(r["stream"]))
                if prev_total_ms is not None:
                    reply["server_timing"]["prev_total_ms"] = prev_total_ms
                await self._timed(ws.send(pack(reply)))
                prev_total_ms = (time.monotonic() - start) * 1e3
        except TimeoutError:
            self.log(f"session {session.robot}: idle for {self.idle_timeout_s:g} s, closed")
            await ws.close(IDLE_CLOSE_CODE, f"idle for {self.idle_timeout_s:g} s (--idle-timeout)")
        except ConnectionClosed:
            pass
        finally:       # once only: a closed session's robot name is reused
            self.hub.close(session)
            self.log(f"session {session.robot} closed")

    async def run(self, host: str, port: int, ready=None, stop: asyncio.Event | None = None) -> None:
        """Serve until `stop` is set; `ready(port)` once listening (port 0: the one chosen)."""
        warning = exposure_warning(host, self.api_key)
        if warning:
            self.log(warning)
        try:
            async with serve(self._session, host, port, process_request=self._check_request,
                             process_response=self._check_response,
                             max_size=self.max_message_bytes, max_queue=MAX_QUEUE, compression=None,
                             create_connection=self._connection_class()) as server:
                bound = server.sockets[0].getsockname()[1]
                if ready is not None:
                    ready(bound)
                await (stop or asyncio.Event()).wait()
        finally:
            self._workers.shutdown(wait=False, cancel_futures=True)
