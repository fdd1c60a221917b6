"""The websocket server of `oxygen serve`, on openpi's protocol.

On connect the server sends its metadata (one msgpack message); then each client message is
one observation and each reply one dict with `actions` and `server_timing` (`infer_ms`, and
`prev_total_ms` from the second reply on), plus the language extension's keys
(sessions.py). A message that cannot be used gets the reason as a text message, and that
connection alone is closed with code 1011, as openpi's server does with its traceback;
every other session goes on. GET /healthz answers 200 "OK". With an API key, a connection
without the header `Authorization: Api-Key <key>` is refused with 401 before it opens.
"""
from __future__ import annotations

import asyncio
import hmac
import time
from http import HTTPStatus

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from .robot_inputs import InputError
from .sessions import ServerFull, SessionHub
from .wire import WireError, pack, unpack

ERROR_CLOSE_REASON = "Internal server error. Traceback included in previous frame."


class OpenpiServer:
    def __init__(self, hub: SessionHub, inputs, metadata: dict, api_key: str = "",
                 max_message_bytes: int = 32 << 20, log=print):
        self.hub, self.inputs, self.metadata = hub, inputs, metadata
        self.api_key, self.max_message_bytes, self.log = api_key, max_message_bytes, log

    def _check_request(self, connection, request):
        if request.path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if self.api_key:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Api-Key {self.api_key}".encode()):
                self.log(f"refused a connection from {connection.remote_address}: wrong or missing API key")
                return connection.respond(HTTPStatus.UNAUTHORIZED, "wrong or missing API key\n")
        return None

    async def _session(self, ws) -> None:
        try:
            session = await asyncio.to_thread(self.hub.open, self.inputs)
        except ServerFull as e:
            await ws.send(str(e))
            await ws.close(1013, "server full")
            return
        self.log(f"session {session.robot} opened ({ws.remote_address}); {self.hub.sessions} open")
        try:
            await ws.send(pack(self.metadata))
            prev_total_ms = None
            while True:
                try:
                    data = await ws.recv()
                except ConnectionClosed:
                    break
                start = time.monotonic()
                try:
                    reply = await asyncio.wrap_future(self.hub.submit(session, unpack(data)))
                except (WireError, InputError, RuntimeError) as e:   # RuntimeError: the frame failed
                    self.log(f"session {session.robot}: {e}")
                    await ws.send(f"{type(e).__name__}: {e}")
                    await ws.close(1011, ERROR_CLOSE_REASON)
                    break
                if prev_total_ms is not None:
                    reply["server_timing"]["prev_total_ms"] = prev_total_ms
                await ws.send(pack(reply))
                prev_total_ms = (time.monotonic() - start) * 1e3
        except ConnectionClosed:
            pass
        finally:
            self.hub.close(session)
            self.log(f"session {session.robot} closed")

    async def run(self, host: str, port: int, ready=None, stop: asyncio.Event | None = None) -> None:
        """Serve until `stop` is set; `ready(port)` once listening (port 0: the one chosen)."""
        async with serve(self._session, host, port, process_request=self._check_request,
                         max_size=self.max_message_bytes, compression=None) as server:
            bound = server.sockets[0].getsockname()[1]
            if ready is not None:
                ready(bound)
            await (stop or asyncio.Event()).wait()
