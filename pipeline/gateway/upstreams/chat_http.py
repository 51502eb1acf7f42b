"""A Chat Completions endpoint over HTTP: `{base_url}/chat/completions`, the body as sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from deltaguard.errors import UpstreamError
from deltaguard.gateway.upstreams.chat import UpstreamRefused
from deltaguard.gateway.upstreams.transport import error_body, http_errors, sse_events


class HttpChatUpstream:
    """Forwards to `{base_url}/chat/completions` over HTTP, the body as the client sent it."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 120.0) -> None:
        self.url = f"{base_url.rstrip('/')}/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0))

    def _raise_for(self, resp: httpx.Response, raw: bytes) -> None:
        if 400 <= resp.status_code < 500:
            raise UpstreamRefused(resp.status_code, error_body(raw))
        if resp.status_code >= 500:
            raise UpstreamError(
                f"upstream answered {resp.status_code}: {raw[:500].decode('utf-8', 'replace')}"
            )

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        with http_errors("upstream request"):
            resp = await self._client.post(self.url, json=body)
            raw = await resp.aread()
        self._raise_for(resp, raw)
        try:
            out = json.loads(raw)
        except ValueError as exc:
            raise UpstreamError(f"upstream sent invalid JSON: {raw[:200]!r}") from exc
        if not isinstance(out, dict):
            raise UpstreamError("upstream answer is not a JSON object")
        return out

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        with http_errors("upstream request"):
            async with self._client.stream("POST", self.url, json=body) as resp:
                if resp.status_code >= 400:
                    self._raise_for(resp, await resp.aread())
                async for chunk in sse_events(resp):
                    if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
                        message = (chunk.get("error") or {}).get("message", "the model failed")
                        raise UpstreamError(f"upstream failed mid-stream: {message}")
                    yield chunk

    async def aclose(self) -> None:
        await self._client.aclose()
