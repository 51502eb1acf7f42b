"""The gateway's one way out for an error: what a client is told of each error that reaches it.

The domain's errors know nothing of HTTP (`deltaguard.errors`); `client_error` gives each
that reaches a client its `RequestError`, looked up along the exception's classes as
Starlette's `ExceptionMiddleware` looks up its handlers:

    RequestError       itself: the gateway's own refusal (a bad request, a wrong key, a limit)
    TurnBlocked        400 safety_blocked, its categories (a lock-out's locked_until, a
                       blocked action's reason too)
    MonitorVerdictPending  503 monitor_verdict_pending: the previous turn's verdict is late
    UpstreamRefused    the upstream's own status and error body, passed through
    UpstreamError      502 upstream_error

`ErrorExits` answers them. Its handlers are the app's exception handlers: a request (or a
stream before its first event) gets the JSON error response; a WebSocket frame gets an
`error` event, and the socket stays open. Each refusal is counted in
`deltaguard_requests_total` under the transport its route named (`request.state.transport`;
routes that name none are not counted). A stream that fails after its first event tells
its client in its own framing (`client_error` gives the object).

    app = Starlette(routes=..., exception_handlers=ErrorExits(metrics).handlers())
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from deltaguard.errors import MonitorVerdictPending, TurnBlocked, UpstreamError
from deltaguard.gateway.http_errors import RequestError, error_event, error_response, upstream_failed
from deltaguard.gateway.upstreams import UpstreamRefused


def _blocked(exc: TurnBlocked) -> RequestError:
    detail: dict[str, Any] = {"categories": exc.categories}
    if exc.locked_until is not None:
        detail["locked_until"] = exc.locked_until
    if exc.reason:
        detail["reason"] = exc.reason
    return RequestError(exc.message, code="safety_blocked", detail=detail)


def _late(exc: MonitorVerdictPending) -> RequestError:
    return RequestError(str(exc), code="monitor_verdict_pending", status=503, type="server_error")


def _refused(exc: UpstreamRefused) -> RequestError:
    return RequestError(str(exc), code="upstream_refused", status=exc.status, body=exc.body)


_MAPPINGS: dict[type[Exception], Callable[[Any], RequestError]] = {
    RequestError: lambda exc: exc,
    TurnBlocked: _blocked,
    MonitorVerdictPending: _late,
    UpstreamRefused: _refused,
    UpstreamError: lambda exc: upstream_failed(str(exc)),
}

# Every error a client is told of; any other is the gateway's own failure (a 500).
CLIENT_ERRORS: tuple[type[Exception], ...] = tuple(_MAPPINGS)


def client_error(exc: Exception) -> RequestError:
    """What the client is told of `exc` (one of `CLIENT_ERRORS`), most specific class first."""
    for cls in type(exc).__mro__:
        mapping = _MAPPINGS.get(cls)
        if mapping is not None:
            return mapping(exc)
    raise TypeError(f"{type(exc).__name__} is not an error a client is told of") from exc


class ErrorExits:
    """The app's exception handlers: one for HTTP requests (and streams before their
    first event), one for WebSocket frames; both count the refusal."""

    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics

    def handlers(self) -> dict[type[Exception], Callable[..., Any]]:
        """For `Starlette(exception_handlers=...)`."""
        return {cls: self._handle for cls in CLIENT_ERRORS}

    async def _handle(self, conn: Request | WebSocket, exc: Exception) -> Response | None:
        # Starlette calls an exception handler with the request, or with the socket whose
        # endpoint raised.
        if isinstance(conn, WebSocket):
            await self.websocket(conn, exc)
            return None
        return await self.http(conn, exc)

    async def http(self, request: Request, exc: Exception) -> Response:
        err = client_error(exc)
        transport = getattr(request.state, "transport", None)
        if transport is not None:
            self.metrics.requests.labels(transport, err.code).inc()
        return error_response(err)

    async def websocket(self, ws: WebSocket, exc: Exception) -> None:
        """The frame's refusal as an `error` event; the socket serves the next frame."""
        err = client_error(exc)
        self.metrics.requests.labels("websocket", err.code).inc()
        await ws.send_text(json.dumps(error_event(err)))
