"""uvicorn's protocols with read deadlines (slow clients cannot hold connections) and with
WebSockets drained at shutdown (a turn in flight finishes; `draining_websockets`).

uvicorn times out only a keep-alive connection idle after a response: a connection that
sends nothing, or trickles its headers a byte at a time, is held for as long as the client
likes, and a few hundred of them exhaust the server's sockets. `read_deadlines(...)` gives
a protocol class (`uvicorn.Config(http=...)`) that closes a connection whose request
headers are not complete `header_timeout_s` after its first byte (or after the connection
opened), or whose body is not read `body_timeout_s` after its headers. Trickling does not
help: a deadline runs from the start of what it covers, not from the last byte.

    config = uvicorn.Config(app, http=read_deadlines(10.0, 60.0), timeout_keep_alive=5)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


class DeadlineH11Protocol(H11Protocol):
    """H11Protocol with a header deadline and a whole-request deadline (see the module)."""

    header_timeout_s = 10.0
    body_timeout_s = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._reading: str | None = None  # "headers" or "body": which deadline is armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("headers", self.header_timeout_s)  # a connection that sends nothing is dropped too

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms uvicorn's keep-alive (idle) timeout
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Arm, move or drop the deadline as the peer's side of the request moves on."""
        state = self.conn.their_state
        if self.transport.get_protocol() is not self:  # upgraded to a WebSocket
            self._disarm()
        elif state is h11.IDLE:
            if self._reading is None and self.timeout_keep_alive_task is None:
                self._arm("headers", self.header_timeout_s)  # the next request has begun
        elif state is h11.SEND_BODY:
            if self._reading == "headers":
                self._disarm()
                self._arm("body", self.body_timeout_s)
        else:  # read whole, switched to WebSocket, or closed
            self._disarm()

    def _arm(self, what: str, delay: float) -> None:
        self._disarm()
        self._reading = what
        self._deadline = self.loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._reading = None, None

    def _expired(self) -> None:
        what, self._deadline, self._reading = self._reading, None, None
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        if what == "headers" and self.conn.their_state is not h11.IDLE:
            return
        self.logger.info("dropped a client that did not send its request %s in time", what)
        self.transport.close()


def read_deadlines(header_timeout_s: float, body_timeout_s: float) -> type[DeadlineH11Protocol]:
    """The protocol class for `uvicorn.Config(http=...)` with these deadlines."""
    return type(
        "DeadlineH11Protocol",
        (DeadlineH11Protocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )


class DrainingWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, drained at shutdown rather than cut: uvicorn closes
    every socket at once (1012), so a turn in flight is lost to its client. This one tells
    the app (`on_shutdown`), which finishes the socket's turn in flight and closes it
    itself; a socket still open `drain_s` later is closed as uvicorn would."""

    drain_s = 8.0

    @staticmethod
    def on_shutdown() -> None:
        return None

    def shutdown(self) -> None:
        if not self.handshake_complete or self.close_sent or self.disconnected:
            super().shutdown()
            return
        type(self).on_shutdown()
        self.loop.call_later(self.drain_s, self._force_close)

    def _force_close(self) -> None:
        if not self.disconnected:
            super().shutdown()


def draining_websockets(on_shutdown: Callable[[], None], drain_s: float) -> type[DrainingWebSocketProtocol]:
    """The protocol class for `uvicorn.Config(ws=...)`: `on_shutdown` is called when the
    server begins to shut down, and sockets are cut `drain_s` later."""
    return type(
        "DrainingWebSocketProtocol",
        (DrainingWebSocketProtocol,),
        {"on_shutdown": staticmethod(on_shutdown), "drain_s": drain_s},
    )
