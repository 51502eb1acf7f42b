"""The Chat Completions protocol: what the gateway asks of a `/chat/completions` model.

A chat upstream answers a request body exactly as the client sent it (the gateway
forwards every field): `complete(body)` returns the `chat.completion` object,
`stream(body)` yields the `chat.completion.chunk` objects in the order the model sent
them. A model's refusal of the request (HTTP 4xx) is `UpstreamRefused`, carried to the
client with its status and error body; anything else that fails is `UpstreamError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from deltaguard.errors import UpstreamError


class UpstreamRefused(UpstreamError):
    """The upstream answered 4xx: the client's request is at fault, so it sees the model's error."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.body = body if isinstance(body, dict) and "error" in body else {"error": {"message": str(body)}}


class ChatUpstream(Protocol):
    """A Chat Completions model: one completion, or its chunks as they stream."""

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]: ...

    async def aclose(self) -> None: ...
