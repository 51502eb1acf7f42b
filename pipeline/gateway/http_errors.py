"""The one shape of a refused HTTP request: `{"error": {...}}` with the error's status.

Every gateway endpoint (Responses, chat, guard, conversations) answers a `RequestError`
with `error_response`, so that clients meet one error object, the OpenAI SDK's, whatever
route they called. WebSocket frames carry the same object in an `error` event
(`wire.error_event`).

>>> error_response(unauthorized()).status_code
401
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from deltaguard.errors import RequestError


def error_response(err: RequestError) -> JSONResponse:
    """The HTTP response that refuses a request with `err`."""
    return JSONResponse({"error": err.to_error()}, status_code=err.status)


def unauthorized() -> RequestError:
    """A missing or unknown API key (a new error each time: exceptions carry tracebacks)."""
    return RequestError(
        "Incorrect API key provided.", code="invalid_api_key", status=401, type="authentication_error"
    )


def server_overloaded(inflight: int, what: str) -> RequestError:
    """The process has `inflight` `what` (responses, chat completions) in flight, its limit."""
    return RequestError(
        f"the gateway has {inflight} {what} in flight, its limit; retry later",
        code="server_overloaded",
        status=503,
        type="server_error",
    )
