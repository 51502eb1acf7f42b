"""Upstream models: the embedded simulated model, and any Responses-API endpoint.

An upstream is `stream(request, history)`, an async iterator of `TextDelta`,
`FunctionCall` and finally `Finished`, plus `aclose()`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from deltaguard.errors import UpstreamError
from deltaguard.gateway.wire import CreateRequest
from deltaguard.items import Item


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class FunctionCall:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Finished:
    output_tokens: int


UpstreamEvent = TextDelta | FunctionCall | Finished


class Upstream(Protocol):
    def stream(self, req: CreateRequest, history: Sequence[Item]) -> AsyncIterator[UpstreamEvent]: ...

    async def aclose(self) -> None: ...


_WORDS = (
    "the fix is to retry the request after the timeout and keep the cache warm so that the next "
    "call finds the session token before it expires which makes the failing test pass again"
).split()


class SimulatedModel:
    """A deterministic model that streams at `tokens_per_s` and acts like a coding agent.

    With tools in the request, it calls the first function tool `tool_calls` times after
    each user message (the client answers with function_call_output items), then gives a
    final answer of `reply_tokens` tokens. Everything it says is a function of the history.
    """

    def __init__(self, tokens_per_s: float = 1000.0, reply_tokens: int = 40, tool_calls: int = 3) -> None:
        self.tokens_per_s = tokens_per_s
        self.reply_tokens = reply_tokens
        self.tool_calls = tool_calls

    async def _pace(self, start: float, tokens_so_far: int) -> None:
        due = start + tokens_so_far / self.tokens_per_s
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def stream(self, req: CreateRequest, history: Sequence[Item]) -> AsyncIterator[UpstreamEvent]:
        seed = hashlib.sha256(b"".join(i.digest for i in history[-4:]) + str(len(history)).encode()).digest()
        rng = random.Random(seed)
        start = time.monotonic()
        calls_since_user = 0
        for item in reversed(history):
            if item.kind == "message" and item.role == "user":
                break
            calls_since_user += item.kind == "function_call_output"
        tool = next((t for t in req.tools or [] if t.get("type") == "function" and t.get("name")), None)
        if tool is not None and calls_since_user < self.tool_calls:
            args = json.dumps({"path": f"src/{rng.choice(_WORDS)}_{calls_since_user}.py"})
            tokens = max(1, len(args) // 4)
            await self._pace(start, tokens)
            yield FunctionCall(call_id=f"call_{seed.hex()[:24]}", name=str(tool["name"]), arguments=args)
            yield Finished(output_tokens=tokens)
            return
        words = [rng.choice(_WORDS) for _ in range(self.reply_tokens)]
        chunk = 4
        for i in range(0, len(words), chunk):
            await self._pace(start, i + chunk)
            part = " ".join(words[i : i + chunk])
            yield TextDelta(part if i == 0 else " " + part)
        yield Finished(output_tokens=len(words))

    async def aclose(self) -> None:
        return None


class HttpUpstream:
    """Forwards to a Responses-API-compatible endpoint with the full history, streaming."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(self.timeout_s, connect=10.0)
            )
        return self._client

    async def stream(self, req: CreateRequest, history: Sequence[Item]) -> AsyncIterator[UpstreamEvent]:
        body: dict[str, Any] = {
            k: v for k, v in req.body.items() if k not in ("input", "previous_response_id", "stream", "type")
        }
        body.update(model=req.model, input=[i.to_wire() for i in history], stream=True, store=False)
        try:
            async with self._http().stream("POST", f"{self.base_url}/responses", json=body) as resp:
                if resp.status_code >= 400:
                    detail = (await resp.aread()).decode("utf-8", "replace")[:500]
                    raise UpstreamError(f"upstream answered {resp.status_code}: {detail}")
                async for event in _sse_events(resp):
                    kind = event.get("type")
                    if kind == "response.output_text.delta":
                        yield TextDelta(str(event.get("delta", "")))
                    elif (
                        kind == "response.output_item.done"
                        and event.get("item", {}).get("type") == "function_call"
                    ):
                        item = event["item"]
                        yield FunctionCall(item["call_id"], item["name"], item.get("arguments", ""))
                    elif kind == "response.completed":
                        usage = event.get("response", {}).get("usage") or {}
                        yield Finished(int(usage.get("output_tokens", 0)))
                        return
                    elif kind in ("response.failed", "error"):
                        raise UpstreamError(f"upstream failed: {json.dumps(event)[:500]}")
        except httpx.HTTPError as exc:
            raise UpstreamError(f"upstream request failed: {exc}") from exc
        raise UpstreamError("upstream stream ended before response.completed")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


async def _sse_events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    data: list[str] = []
    async for line in resp.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            payload = "\n".join(data)
            data = []
            if payload.strip() == "[DONE]":
                return
            try:
                yield json.loads(payload)
            except ValueError as exc:
                raise UpstreamError(f"upstream sent invalid JSON: {payload[:200]}") from exc
