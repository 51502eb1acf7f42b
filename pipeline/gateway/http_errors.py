"""The one shape of a refused request: `{"error": {...}}`, the OpenAI SDK's error object,
with an HTTP status.

`RequestError` is a refusal in the gateway's own words (status, type, code, param);
`error_exits` turns every other error a client is told of into one, and answers it on
whatever route or transport it arose: as a JSON response (`error_response`), an SSE or
WebSocket `error` event (`error_event`). `ErrorObject` is the object's wire model, and
the guard API's OpenAPI description names it.

>>> error_response(unauthorized()).status_code
401
>>> RequestError("no", code="invalid_value", param="n").to_error()
{'type': 'invalid_request_error', 'code': 'invalid_value', 'message': 'no', 'param': 'n'}
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from starlette.responses import JSONResponse

from deltaguard import defaults
from deltaguard.errors import DeltaGuardError, ItemError


class ErrorObject(BaseModel):
    """The OpenAI error object: what went wrong, for a client and for its SDK."""

    type: str = Field(description="The kind of error: invalid_request_error, authentication_error, ...")
    code: str = Field(description="What was refused, e.g. safety_blocked, invalid_item, invalid_api_key.")
    message: str
    param: str | None = Field(None, description="The request field at fault, when one is.")
    categories: list[str] | None = Field(None, description="Why the safety stage blocked the turn.")
    locked_until: int | None = Field(
        None, description="A lock-out's end (epoch seconds): the conversation is refused until then."
    )
    reason: str | None = Field(
        None, description="What was blocked when it was not the request itself: one of the model's actions."
    )


class Error(BaseModel):
    """The body of every refusal."""

    error: ErrorObject


class RequestError(DeltaGuardError):
    """A request the gateway refuses: HTTP status, error type and code for the client.

    `detail`: more fields of the error object (a blocked turn's `categories`, a lock-out's
    `locked_until`). `body`: the whole answer when the refusal is not the gateway's own
    (an upstream's, passed through as it came). `retry_after_s`: when a client may retry
    (an overload), sent as `Retry-After`."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        detail: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.message = message
        self.code = code
        self.param = param
        self.status = status
        self.type = type
        self.detail = detail or {}
        self.body = body

    def to_error(self) -> dict[str, Any]:
        """The error object, as the SDK reads it."""
        if self.body is not None:
            return dict(self.body["error"])
        error = ErrorObject(
            type=self.type, code=self.code, message=self.message, param=self.param, **self.detail
        )
        return error.model_dump(exclude_unset=True)

    def to_response_error(self) -> dict[str, Any]:
        """The error of a response that failed after it began (its `response.failed`
        event): the hosted API's `response.error` holds a code and a message, no more."""
        return {"code": self.code, "message": self.message}


def error_response(err: RequestError) -> JSONResponse:
    """The HTTP response that refuses a request with `err`."""
    headers = {"Retry-After": str(err.retry_after_s)} if err.retry_after_s is not None else None
    return JSONResponse(err.body or {"error": err.to_error()}, status_code=err.status, headers=headers)


def error_event(err: RequestError, sequence_number: int | None = None) -> dict[str, Any]:
    """The `error` event of a stream or a socket, carrying the same object."""
    event: dict[str, Any] = {"type": "error", "error": err.to_error(), "status": err.status}
    if sequence_number is not None:
        event["sequence_number"] = sequence_number
    return event


def unauthorized() -> RequestError:
    """A missing or unknown API key (a new error each time: exceptions carry tracebacks)."""
    return RequestError(
        "Incorrect API key provided.", code="invalid_api_key", status=401, type="authentication_error"
    )


def _overloaded(message: str, code: str, status: int, type_: str) -> RequestError:
    """A refusal for load: the client is told when to retry (`Retry-After`)."""
    return RequestError(
        message, code=code, status=status, type=type_, retry_after_s=defaults.OVERLOAD_RETRY_AFTER_S
    )


def server_overloaded(inflight: int, what: str) -> RequestError:
    """The process has `inflight` `what` (responses, chat completions) in flight, its limit."""
    message = f"the gateway has {inflight} {what} in flight, its limit; retry later"
    return _overloaded(message, "server_overloaded", 503, "server_error")


def tenant_overloaded(held: int) -> RequestError:
    """A tenant has `held` requests in flight, its limit (`max_inflight_per_tenant`)."""
    message = f"this API key has {held} requests in flight, its limit; retry later"
    return _overloaded(message, "tenant_overloaded", 429, "rate_limit_error")


def upstream_failed(message: str) -> RequestError:
    """The upstream model failed or stalled: the gateway's 502."""
    return RequestError(message, code="upstream_error", status=502, type="server_error")


def invalid_item(exc: ItemError, what: str = "item") -> RequestError:
    """An item (`what`: a message, an answer) of the wrong shape; `param` names its field."""
    return RequestError(f"invalid {what}: {exc}", code="invalid_item", param=exc.field)
