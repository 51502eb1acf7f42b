"""Upstream models: the embedded simulated model, and any Responses-API endpoint.

An upstream is `stream(call)`, an async iterator of Responses API stream events exactly
as the model produced them (dicts: `response.created`, ..., `response.completed`), plus
`aclose()`. The gateway forwards them to its client unchanged but for the response id,
so everything the model sends (reasoning items and their encrypted content, freeform
tool calls, annotations, usage) reaches the client.

`UpstreamCall` carries both views of the turn's input: the whole history, and only the
items after the upstream response it continues (`parent`). `HttpUpstream` sends the
whole history with `store: false`; `WebSocketUpstream` keeps one persistent connection
per conversation and sends only the new items with the upstream's own
`previous_response_id`, falling back to a full resend when the upstream's state is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from socket import IPPROTO_TCP, TCP_NODELAY
from typing import Any, Protocol

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from deltaguard.errors import UpstreamError
from deltaguard.gateway.wire import new_id, response_object, usage_object
from deltaguard.parsing import parse_items

log = logging.getLogger("deltaguard.gateway.upstream")

# Events that end a response on the stream.
TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One turn for the model.

    `body`: the request fields to forward as the client sent them (model, tools,
    reasoning, text, include, ...; never input or state references). `history`: every
    input item of the conversation, oldest first (wire shapes). `new_items`: the suffix
    of `history` after `parent`, the upstream's id of the response this turn continues
    (None when unknown: then only a full resend works). `conversation` pins a persistent
    connection; `generate=False` primes the upstream's state without generating.
    """

    body: dict[str, Any]
    history: Sequence[dict[str, Any]]
    new_items: Sequence[dict[str, Any]]
    parent: str | None = None
    conversation: str = ""
    generate: bool = True
    tools: list[dict[str, Any]] | None = None  # in effect (inherited when not resent); informational


class Upstream(Protocol):
    def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


# -- the simulated model ---------------------------------------------------------------

_WORDS = (
    "the fix is to retry the request after the timeout and keep the cache warm so that the next "
    "call finds the session token before it expires which makes the failing test pass again"
).split()


class SimulatedModel:
    """A deterministic model that streams at `tokens_per_s` and acts like a coding agent.

    With tools in the request, it calls the first function tool `tool_calls` times after
    each user message (the client answers with function_call_output items), then gives a
    final answer of `reply_tokens` tokens. Everything it says is a function of the history.
    `prefill_s_per_token` adds the cost of reading each input token the model has not
    seen before (the history after `parent` only, as a model with a prompt cache does).
    """

    def __init__(
        self,
        tokens_per_s: float = 1000.0,
        reply_tokens: int = 40,
        tool_calls: int = 3,
        prefill_s_per_token: float = 0.0,
    ) -> None:
        self.tokens_per_s = tokens_per_s
        self.reply_tokens = reply_tokens
        self.tool_calls = tool_calls
        self.prefill_s_per_token = prefill_s_per_token
        self._seen: OrderedDict[str, None] = OrderedDict()  # response ids it produced

    async def _pace(self, start: float, tokens_so_far: int) -> None:
        due = start + tokens_so_far / self.tokens_per_s
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        history = parse_items(list(call.history), "input")
        fresh = call.new_items if call.parent in self._seen else call.history
        input_tokens = sum(i.tokens for i in history)
        cached = input_tokens - sum(i.tokens for i in parse_items(list(fresh), "input"))
        response_id = new_id("resp")
        created_at = int(time.time())
        seq = 0

        def event(kind: str, **fields: Any) -> dict[str, Any]:
            nonlocal seq
            seq += 1
            return {"type": kind, "sequence_number": seq - 1, **fields}

        def response(status: str, output: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
            body = {**call.body, "tools": call.body.get("tools") or []}
            return response_object(
                response_id, body, status=status, output=output, usage=usage, created_at=created_at
            )

        yield event("response.created", response=response("in_progress", []))
        yield event("response.in_progress", response=response("in_progress", []))
        if self.prefill_s_per_token:
            await asyncio.sleep(self.prefill_s_per_token * (input_tokens - cached))
        output: list[dict[str, Any]] = []
        output_tokens = 0
        if call.generate:
            start = time.monotonic()
            async for ev, tokens in self._answer(call, history, start, event):
                if ev["type"] == "response.output_item.done":
                    output.append(ev["item"])
                output_tokens += tokens
                yield ev
        usage = usage_object(input_tokens, cached, output_tokens)
        self._seen[response_id] = None
        while len(self._seen) > 10_000:
            self._seen.popitem(last=False)
        yield event("response.completed", response=response("completed", output, usage))

    async def _answer(
        self, call: UpstreamCall, history: Sequence[Any], start: float, event: Any
    ) -> AsyncIterator[tuple[dict[str, Any], int]]:
        """(event, output tokens it completes): a function call, or a streamed answer."""
        seed = hashlib.sha256(b"".join(i.digest for i in history[-4:]) + str(len(history)).encode()).digest()
        rng = random.Random(seed)
        calls_since_user = 0
        for item in reversed(history):
            if item.kind == "message" and item.role == "user":
                break
            calls_since_user += item.kind == "function_call_output"
        tool = next((t for t in call.tools or [] if t.get("type") == "function" and t.get("name")), None)
        if tool is not None and calls_since_user < self.tool_calls:
            args = json.dumps({"path": f"src/{rng.choice(_WORDS)}_{calls_since_user}.py"})
            tokens = max(1, len(args) // 4)
            await self._pace(start, tokens)
            call_id, name = new_id("call"), str(tool["name"])  # unique, as a real model's are
            item = {"id": new_id("fc"), "type": "function_call", "status": "completed", "arguments": args}
            item.update(call_id=call_id, name=name)
            at = {"item_id": item["id"], "output_index": 0}
            added = {**item, "status": "in_progress", "arguments": ""}
            yield event("response.output_item.added", output_index=0, item=added), 0
            yield event("response.function_call_arguments.delta", **at, delta=args), 0
            yield event("response.function_call_arguments.done", **at, name=name, arguments=args), 0
            yield event("response.output_item.done", output_index=0, item=item), tokens
            return
        words = [rng.choice(_WORDS) for _ in range(self.reply_tokens)]
        added = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress"}
        added["content"] = []
        at = {"item_id": added["id"], "output_index": 0, "content_index": 0}
        yield event("response.output_item.added", output_index=0, item=added), 0
        part = {"type": "output_text", "text": "", "annotations": []}
        yield event("response.content_part.added", **at, part=part), 0
        chunk = 4
        text = ""
        for i in range(0, len(words), chunk):
            await self._pace(start, i + chunk)
            delta = ("" if i == 0 else " ") + " ".join(words[i : i + chunk])
            text += delta
            yield event("response.output_text.delta", **at, delta=delta, logprobs=[]), 0
        yield event("response.output_text.done", **at, text=text, logprobs=[]), 0
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        yield event("response.content_part.done", **at, part=part), 0
        item = {**added, "status": "completed", "content": [part]}
        yield event("response.output_item.done", output_index=0, item=item), len(words)

    async def aclose(self) -> None:
        return None


# -- HTTP ------------------------------------------------------------------------------


def _http_errors(what: str) -> contextlib.AbstractContextManager[None]:
    """httpx's errors become `UpstreamError` here, and only here."""

    @contextlib.contextmanager
    def boundary() -> Any:
        try:
            yield
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{what} failed: {exc}") from exc

    return boundary()


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
        with _http_errors("upstream request"):
            async with self._http().stream(
                "POST", f"{self.base_url}/responses", content=payload, headers=headers
            ) as resp:
                if resp.status_code >= 400:
                    detail = (await resp.aread()).decode("utf-8", "replace")[:500]
                    raise UpstreamError(f"upstream answered {resp.status_code}: {detail}")
                async for event in _sse_events(resp):
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
    done = response_object(response_id, call.body, status="completed", output=[], usage=usage_object(0, 0, 0))
    yield {"type": "response.created", "sequence_number": 0, "response": created}
    yield {"type": "response.completed", "sequence_number": 1, "response": done}


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


# -- WebSocket mode --------------------------------------------------------------------


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
