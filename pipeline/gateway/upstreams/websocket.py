"""The upstream's Responses WebSocket mode: per conversation, one persistent connection
that carries only each turn's new items with the upstream's own `previous_response_id`,
falling back to a full resend when the upstream's state is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from socket import IPPROTO_TCP, TCP_NODELAY
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from deltaguard.errors import UpstreamError
from deltaguard.gateway.upstreams.responses import TERMINAL_EVENTS, UpstreamCall
from deltaguard.gateway.upstreams.responses_http import HttpUpstream

log = logging.getLogger("deltaguard.gateway.upstream")


@dataclass
class _Connection:
    """One persistent upstream socket, owned by one conversation; turns on it run in order."""

    socket: ClientConnection
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    responses: OrderedDict[str, None] = field(default_factory=OrderedDict)  # ids it can continue


class WebSocketUpstream:
    """The upstream's Responses WebSocket mode: per conversation, a persistent connection
    that carries only each turn's new items with the upstream's `previous_response_id`.

    Connections are pooled (`max_connections`, least recently used closed first). A turn
    whose parent is not on its conversation's connection (a new or evicted connection,
    an unknown parent) resends the whole history; so does one the upstream answers with
    `previous_response_not_found` (its cache is gone). When the upstream has no
    WebSocket mode at all (the handshake is refused), every later turn goes over
    `fallback` (HTTP, the whole history) and the gateway logs it once.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        fallback: HttpUpstream,
        max_connections: int = 256,
        connect_timeout_s: float = 10.0,
        max_frame_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        scheme, _, rest = base_url.rstrip("/").partition("://")
        self.url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}/responses"
        self.api_key = api_key
        self.fallback = fallback
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self._pool: OrderedDict[str, _Connection] = OrderedDict()
        self.available = True  # false once the upstream refused the WebSocket handshake
        self.turns = 0
        self.full_resends = 0
        self.bytes_sent = 0
        self.frames_sent: list[int] = []  # bytes of each response.create (bounded)

    async def _connection(self, conversation: str) -> _Connection:
        conn = self._pool.get(conversation)
        if conn is not None:
            self._pool.move_to_end(conversation)
            return conn
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        socket = await asyncio.wait_for(
            websockets.connect(self.url, additional_headers=headers, max_size=self.max_frame_bytes),
            self.connect_timeout_s,
        )
        raw = socket.transport.get_extra_info("socket")
        if raw is not None:  # small frames go out at once, not after the peer's delayed ACK
            raw.setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)
        conn = _Connection(socket)
        self._pool[conversation] = conn
        while len(self._pool) > self.max_connections:
            _, old = self._pool.popitem(last=False)
            asyncio.get_running_loop().create_task(old.socket.close())
        return conn

    def _drop(self, conversation: str, conn: _Connection) -> None:
        if self._pool.get(conversation) is conn:
            del self._pool[conversation]
        asyncio.get_running_loop().create_task(conn.socket.close())

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        if not self.available:
            async for event in self.fallback.stream(call):
                yield event
            return
        try:
            conn = await self._connection(call.conversation)
        except (OSError, TimeoutError, websockets.InvalidHandshake, websockets.InvalidURI) as exc:
            if isinstance(exc, websockets.InvalidStatus | websockets.InvalidURI):
                log.warning("upstream %s has no WebSocket mode (%s); using HTTP", self.url, exc)
                self.available = False
                async for event in self.fallback.stream(call):
                    yield event
                return
            raise UpstreamError(f"upstream WebSocket connect failed: {exc!r}") from exc
        self.turns += 1
        started = False  # whether the client has been sent anything of this turn
        try:
            async with conn.lock:
                delta = call.parent is not None and call.parent in conn.responses
                try:
                    async for event in self._turn(conn, call, delta):
                        started = True
                        yield event
                except _StateGone:
                    # The upstream evicted the parent from its connection cache: rebuild it.
                    async for event in self._turn(conn, call, delta=False):
                        started = True
                        yield event
        except (websockets.ConnectionClosed, OSError) as exc:
            self._drop(call.conversation, conn)
            if started:
                raise UpstreamError(f"upstream WebSocket closed mid-response: {exc!r}") from exc
            # A pooled socket the upstream had closed (idle, or its lifetime limit): one
            # new connection, and the whole history, since its state went with the old one.
            log.info("upstream socket for %s was closed; reconnecting", call.conversation)
            try:
                conn = await self._connection(call.conversation)
                async with conn.lock:
                    async for event in self._turn(conn, call, delta=False):
                        yield event
            except (websockets.ConnectionClosed, OSError, websockets.InvalidHandshake) as again:
                self._drop(call.conversation, conn)
                raise UpstreamError(f"upstream WebSocket failed: {again!r}") from again

    async def _turn(
        self, conn: _Connection, call: UpstreamCall, delta: bool
    ) -> AsyncIterator[dict[str, Any]]:
        frame: dict[str, Any] = {"type": "response.create", **call.body, "store": False}
        if delta:
            frame.update(input=list(call.new_items), previous_response_id=call.parent)
        else:
            self.full_resends += 1
            frame["input"] = list(call.history)
        if not call.generate:
            frame["generate"] = False
        text = json.dumps(frame, ensure_ascii=False)
        self.bytes_sent += len(text.encode("utf-8"))
        self.frames_sent = [*self.frames_sent[-999:], len(text.encode("utf-8"))]
        await conn.socket.send(text)
        while True:
            raw = await conn.socket.recv()
            try:
                event = json.loads(raw)
            except ValueError as exc:
                raise UpstreamError(f"upstream sent invalid JSON: {str(raw)[:200]}") from exc
            kind = event.get("type")
            if kind == "error":
                code = (event.get("error") or {}).get("code")
                if code == "previous_response_not_found" and delta:
                    raise _StateGone
                raise UpstreamError(f"upstream error: {json.dumps(event)[:500]}")
            if kind in TERMINAL_EVENTS:
                # Remembered before it is handed on: the consumer may stop reading here.
                response_id = (event.get("response") or {}).get("id")
                if kind != "response.failed" and response_id:
                    conn.responses[response_id] = None
                    while len(conn.responses) > 256:
                        conn.responses.popitem(last=False)
                yield event
                return
            yield event

    async def aclose(self) -> None:
        for conn in self._pool.values():
            with contextlib.suppress(Exception):
                await conn.socket.close()
        self._pool.clear()
        await self.fallback.aclose()


class _StateGone(Exception):
    """The upstream answered previous_response_not_found: resend the whole history."""
