"""What both protocols' upstreams share: the httpx error boundary and server-sent events of
the HTTP ones, and a deadline on any upstream's silence."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from deltaguard.errors import UpstreamError
from deltaguard.streams import close_source


def http_errors(what: str) -> contextlib.AbstractContextManager[None]:
    """httpx's errors become `UpstreamError` here, and only here."""

    @contextlib.contextmanager
    def boundary() -> Any:
        try:
            yield
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{what} failed: {exc}") from exc

    return boundary()


async def sse_events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of an SSE response, up to `[DONE]`."""
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


def error_body(raw: bytes) -> Any:
    """An error answer's body: its JSON, or the start of its text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:500]


async def with_stall_timeout(
    events: AsyncIterator[dict[str, Any]], timeout_s: float
) -> AsyncIterator[dict[str, Any]]:
    """The upstream's events, failing with `UpstreamError` when it goes quiet too long."""
    iterator = aiter(events)
    try:
        while True:
            try:
                event = await asyncio.wait_for(anext(iterator), timeout_s)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise UpstreamError(f"upstream sent nothing for {timeout_s:g} s") from None
            yield event
    finally:
        await close_source(iterator)
