"""A Responses-API endpoint over HTTP: the whole history every turn, `store: false`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from deltaguard.errors import UpstreamError
from deltaguard.gateway.upstreams.responses import TERMINAL_EVENTS, UpstreamCall
from deltaguard.gateway.upstreams.transport import http_errors, sse_events
from deltaguard.gateway.wire import new_id, response_object
from deltaguard.usage import Usage, usage_object


class HttpUpstream:
    """Forwards to a Responses-API endpoint over HTTP: the whole history, `store: false`."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None
        self.requests = 0
        self.bytes_sent = 0

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(self.timeout_s, connect=10.0)
            )
        return self._client

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        if not call.generate:
            # Over HTTP with the whole history every turn there is no upstream state to
            # prime: the warm-up is answered here, without calling the model.
            async for event in _primed(call):
                yield event
            return
        body = {**call.body, "input": list(call.history), "stream": True, "store": False}
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.requests += 1
        self.bytes_sent += len(payload)
        headers = {"content-type": "application/json"}
        with http_errors("upstream request"):
            async with self._http().stream(
                "POST", f"{self.base_url}/responses", content=payload, headers=headers
            ) as resp:
                if resp.status_code >= 400:
                    detail = (await resp.aread()).decode("utf-8", "replace")[:500]
                    raise UpstreamError(f"upstream answered {resp.status_code}: {detail}")
                async for event in sse_events(resp):
                    yield event
                    if event.get("type") in TERMINAL_EVENTS:
                        return
        raise UpstreamError("upstream stream ended before response.completed")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


async def _primed(call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
    """The events of a `generate: false` response: created, then completed with no output."""
    response_id = new_id("resp")
    created = response_object(response_id, call.body, status="in_progress", output=[])
    usage = usage_object(Usage(0, 0, 0))
    done = response_object(response_id, call.body, status="completed", output=[], usage=usage)
    yield {"type": "response.created", "sequence_number": 0, "response": created}
    yield {"type": "response.completed", "sequence_number": 1, "response": done}
