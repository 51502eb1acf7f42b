"""A Responses-API upstream that answers the way a current reasoning model does.

    with running_reasoning_upstream(policy=my_policy) as (base_url, recorder):
        OpenAI(base_url=base_url, api_key="x").responses.create(model="m", input="hi")

Written from the Responses API reference, for integration tests and benchmarks:

- `POST /v1/responses`: JSON (`stream` false) or server-sent events (`stream` true).
  `previous_response_id` is honoured over HTTP only for a stored response (`store` not
  false on both requests); otherwise HTTP 400 `previous_response_not_found`.
- WebSocket `/v1/responses`: `response.create` events (the POST body without `stream`),
  answered with the same events. Each socket caches the responses it produced, so a
  follow-up sends only its new items with `previous_response_id`; an id this socket does
  not hold gets an `error` event `previous_response_not_found` and the socket stays open.
  `generate: false` primes the cache with the input and returns a response with no output.
- Output: reasoning items (summaries; `encrypted_content` when `include` asks for
  `reasoning.encrypted_content`), messages with a `url_citation` annotation, function
  calls and freeform `custom_tool_call`s, each with its stream events, in the documented
  order, numbered by `sequence_number`. `response.completed` echoes the request's fields
  and reports usage with cached tokens (covered by `previous_response_id` or a prompt-cache
  prefix hit) and reasoning tokens.
- `encrypted_content` is sealed with a per-server key: reasoning items sent back are
  verified (issued here, unchanged) and the result recorded; a forged or altered one is
  refused with `invalid_encrypted_content`, as the hosted API refuses it.
- What to produce is a policy: `(history, body) -> [output item specs]` (see `reasoning`,
  `message`, `function_call`, `custom_tool_call`); `coding_agent_policy()` is the default.
- Every request is recorded (`Recorder`) for tests to assert on; `prefill_s_per_token`
  models the prefill cost of uncached input tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import gzip
import hashlib
import hmac
import itertools
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from deltaguard.gateway.server import free_port
from deltaguard.tools.gateway_thread import in_thread

Item = dict[str, Any]
Policy = Callable[[list[Item], dict[str, Any]], list[Item]]
Transport = Literal["http", "sse", "ws"]

ENCRYPTED_REASONING = "reasoning.encrypted_content"
# Fields of the request that describe the transport, not the response (never echoed).
_NOT_ECHOED = frozenset({"input", "stream", "stream_options", "type", "generate"})


# --- output item specs (what a policy returns) ------------------------------------------


def reasoning(*summary: str, reasoning_tokens: int | None = None) -> Item:
    """A reasoning item with these summary parts; `reasoning_tokens` hidden tokens behind it
    (default: four times the summary's length, as hidden reasoning runs longer)."""
    spec: Item = {"type": "reasoning", "summary": list(summary)}
    if reasoning_tokens is not None:
        spec["reasoning_tokens"] = reasoning_tokens
    return spec


def message(text: str, annotations: Sequence[Mapping[str, Any]] = (), **extra: Any) -> Item:
    """An assistant message; `annotations` are output_text annotations (e.g. `url_citation`),
    `extra` fields (such as `phase`) are copied onto the item."""
    return {"type": "message", "text": text, "annotations": [dict(a) for a in annotations], **extra}


def url_citation(text: str, quote: str, url: str, title: str) -> Item:
    """A `url_citation` annotation over the first occurrence of `quote` in `text`."""
    start = text.index(quote)
    return {
        "type": "url_citation",
        "start_index": start,
        "end_index": start + len(quote),
        "url": url,
        "title": title,
    }


def function_call(name: str, arguments: str | Mapping[str, Any], **extra: Any) -> Item:
    """A function tool call; `arguments` as a JSON string or a dict."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"type": "function_call", "name": name, "arguments": args, **extra}


def custom_tool_call(name: str, input: str, **extra: Any) -> Item:
    """A freeform (custom) tool call, such as Codex's `apply_patch`."""
    return {"type": "custom_tool_call", "name": name, "input": input, **extra}


# --- history helpers (for policies) -----------------------------------------------------


def item_type(item: Mapping[str, Any]) -> str:
    """An input item's type: a bare `{"role": ..., "content": ...}` is a message."""
    return str(item.get("type") or ("message" if "role" in item else "unknown"))


def message_text(item: Mapping[str, Any]) -> str:
    """The text of a message item, whatever the shape of its content."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def since_last_user_message(history: Sequence[Item]) -> list[Item]:
    """The items after the last user message (one agent turn so far)."""
    for i in range(len(history) - 1, -1, -1):
        if item_type(history[i]) == "message" and history[i].get("role") == "user":
            return list(history[i + 1 :])
    return list(history)


def tool_outputs(history: Sequence[Item]) -> dict[str, str]:
    """call_id -> output text of every tool output item in `history`."""
    out: dict[str, str] = {}
    for item in history:
        if item_type(item).endswith("_output") and "call_id" in item:
            value = item.get("output")
            if isinstance(value, list):  # output content parts
                value = "".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
            out[str(item["call_id"])] = str(value)
    return out


def coding_agent_policy(calls: int = 2) -> Policy:
    """Acts like a coding agent's model: after each user message it calls the first function
    or custom tool in `tools` `calls` times (one call per response, each after a reasoning
    item), then answers with a message carrying a url_citation."""

    def policy(history: list[Item], body: dict[str, Any]) -> list[Item]:
        tools = [t for t in body.get("tools") or [] if t.get("type") in ("function", "custom")]
        made = sum(1 for i in since_last_user_message(history) if item_type(i).endswith("call"))
        if tools and made < calls:
            tool = tools[0]
            name = str(tool.get("name"))
            think = reasoning(f"Step {made + 1}: I need more context, so I call {name}.")
            if tool["type"] == "custom":
                return [think, custom_tool_call(name, f"step {made + 1}")]
            return [think, function_call(name, _arguments_for(tool, made + 1))]
        text = "Done: the change is in place. See the Python docs on range for the bounds."
        cite = url_citation(
            text, "Python docs on range", "https://docs.python.org/3/library/stdtypes.html#range", "range"
        )
        return [reasoning("Everything checks out; summarising for the user."), message(text, [cite])]

    return policy


def _arguments_for(tool: Mapping[str, Any], step: int) -> dict[str, Any]:
    params = tool.get("parameters") or {}
    props = params.get("properties") or {}
    fill = {
        "string": f"step {step}",
        "number": step,
        "integer": step,
        "boolean": False,
        "array": [],
        "object": {},
    }
    return {
        k: fill.get(str(props.get(k, {}).get("type")), f"step {step}") for k in params.get("required") or []
    }


# --- tokens, sealing ---------------------------------------------------------------------


def count_tokens(text: str) -> int:
    """About four characters per token, as tiktoken gives on English and code."""
    return (len(text) + 3) // 4


def _visible_text(item: Mapping[str, Any]) -> str:
    """What the model reads of an item (ids and statuses are not part of the prompt)."""
    kept = {k: v for k, v in item.items() if k not in ("id", "status") and v is not None}
    return json.dumps(kept, sort_keys=True)


class _Sealer:
    """Seals reasoning items: `encrypted_content` is nonce | ciphertext | HMAC, opaque to
    anyone without the key, and bound to the item's id and summary."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _stream(self, nonce: bytes, n: int) -> bytes:
        blocks = (
            hashlib.sha256(self._key + nonce + i.to_bytes(4, "big")).digest() for i in itertools.count()
        )
        return b"".join(itertools.islice(blocks, (n + 31) // 32))[:n]

    def seal(self, payload: Mapping[str, Any]) -> str:
        plain = json.dumps(payload, sort_keys=True).encode()
        nonce = secrets.token_bytes(12)
        cipher = bytes(a ^ b for a, b in zip(plain, self._stream(nonce, len(plain)), strict=True))
        mac = hmac.new(self._key, nonce + cipher, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(nonce + cipher + mac).decode()

    def open(self, token: str) -> dict[str, Any] | None:
        try:
            raw = base64.urlsafe_b64decode(token.encode())
        except (ValueError, UnicodeEncodeError):
            return None
        nonce, cipher, mac = raw[:12], raw[12:-32], raw[-32:]
        if len(raw) < 45 or not hmac.compare_digest(
            mac, hmac.new(self._key, nonce + cipher, hashlib.sha256).digest()
        ):
            return None
        plain = bytes(a ^ b for a, b in zip(cipher, self._stream(nonce, len(cipher)), strict=True))
        return json.loads(plain)


def _summary_texts(item: Mapping[str, Any]) -> list[str]:
    return [str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in item.get("summary") or []]


# --- the record ----------------------------------------------------------------------------


@dataclass(slots=True)
class ReasoningCheck:
    """A reasoning item the upstream got back: `via` the request's input or the
    `previous_response_id` chain; `ok` when it is one this upstream issued, unchanged."""

    item_id: str
    via: Literal["input", "previous_response_id"]
    ok: bool
    reason: str = ""


@dataclass(slots=True)
class UpstreamRequest:
    """One request as the upstream received it."""

    transport: Transport
    raw_bytes: int
    body: Any
    headers: dict[str, str]
    input_items: int = 0
    previous_response_id: str | None = None
    generate: bool = True
    history_items: int = 0  # input items plus those the previous response chain covers
    history_text_chars: int = 0  # model-visible characters of that whole history and the tools
    history: list[Item] = field(default_factory=list)  # that whole history, as the model read it
    response_id: str | None = None
    error: str | None = None  # the error code, when refused
    usage: dict[str, Any] | None = None
    reasoning_checks: list[ReasoningCheck] = field(default_factory=list)
    at: float = field(default_factory=time.monotonic)


class Recorder:
    """Everything the upstream received and produced, safe to read from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[UpstreamRequest] = []
        self.responses: dict[str, dict[str, Any]] = {}  # id -> the completed response object
        self.events: dict[str, list[dict[str, Any]]] = {}  # id -> its stream events, in order
        self.issued_reasoning: dict[str, str] = {}  # reasoning item id -> the response that issued it
        self.ws_connections: list[dict[str, str]] = []  # handshake headers, one per socket

    def _add(self, request: UpstreamRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _finish(
        self, request: UpstreamRequest, response: dict[str, Any], events: list[dict[str, Any]]
    ) -> None:
        with self._lock:
            self.responses[response["id"]] = response
            self.events[response["id"]] = events
            for item in response["output"]:
                if item["type"] == "reasoning":
                    self.issued_reasoning[item["id"]] = response["id"]

    def clear(self) -> None:
        """Forget what was recorded so far (the upstream's state is kept)."""
        with self._lock:
            self.requests.clear()
            self.responses.clear()
            self.events.clear()
            self.issued_reasoning.clear()
            self.ws_connections.clear()

    def by_transport(self, *transports: Transport) -> list[UpstreamRequest]:
        with self._lock:
            return [r for r in self.requests if r.transport in transports]

    @property
    def generated(self) -> list[UpstreamRequest]:
        """Requests answered with a generation (not refused, not `generate: false`)."""
        with self._lock:
            return [r for r in self.requests if r.response_id and r.generate]

    @property
    def reasoning_checks(self) -> list[ReasoningCheck]:
        with self._lock:
            return [c for r in self.requests for c in r.reasoning_checks]

    def unreturned_reasoning(self) -> set[str]:
        """Ids of reasoning items issued but never seen again (in a later input or chain)."""
        seen = {c.item_id for c in self.reasoning_checks if c.ok}
        with self._lock:
            return set(self.issued_reasoning) - seen

    def reasoning_round_tripped(self) -> bool:
        """Every reasoning item sent back was issued here, unchanged, and every one issued
        came back, except those of the last generated response (nothing followed it)."""
        checks = self.reasoning_checks
        generated = self.generated
        if not checks or not all(c.ok for c in checks) or not generated:
            return False
        last = self.responses.get(generated[-1].response_id or "", {"output": []})
        last_ids = {i["id"] for i in last["output"] if i["type"] == "reasoning"}
        return self.unreturned_reasoning() <= last_ids


# --- the server ------------------------------------------------------------------------------


class ApiError(Exception):
    """A refused request: HTTP status and the API's error object."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = {"type": "invalid_request_error", "code": code, "message": message, "param": param}


@dataclass(slots=True)
class _Turn:
    body: dict[str, Any]
    record: UpstreamRequest
    history: list[Item]
    input_tokens: int
    cached_tokens: int
    response_id: str
    chain_digests: list[bytes]


class _PromptCache:
    """Prefixes already computed, as a hash chain over (instructions + tools, item, item, ...)
    per prompt_cache_key: a request's cached tokens are those of its longest known prefix."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self._known: dict[tuple[str, bytes], int] = {}
        self._max = max_entries

    @staticmethod
    def chain(prefix: str, items: Sequence[Item]) -> tuple[list[bytes], list[int]]:
        digest = hashlib.sha256(prefix.encode()).digest()
        digests, tokens = [digest], [count_tokens(prefix)]
        for item in items:
            digest = hashlib.sha256(digest + _visible_text(item).encode()).digest()
            digests.append(digest)
            tokens.append(tokens[-1] + count_tokens(_visible_text(item)))
        return digests, tokens

    def cached(self, key: str, digests: Sequence[bytes]) -> int:
        # The last item is always computed (a prompt is never served wholly from cache).
        for digest in reversed(digests[:-1]):
            hit = self._known.get((key, digest))
            if hit is not None:
                return hit
        return 0

    def add(self, key: str, digests: Sequence[bytes], tokens: Sequence[int]) -> None:
        if len(self._known) > self._max:
            self._known.clear()
        for digest, n in zip(digests, tokens, strict=True):
            self._known[(key, digest)] = n


class ReasoningUpstream:
    """The ASGI app (`.app`) and its state; see the module docstring."""

    def __init__(
        self,
        policy: Policy | None = None,
        prefill_s_per_token: float = 0.0,
        ws_cache_size: int = 64,
        recorder: Recorder | None = None,
        ws_turns_per_connection: int | None = None,
    ) -> None:
        """`ws_turns_per_connection`: close a socket after that many turns (as a hosted
        API closes connections at their lifetime limit); None: never."""
        self.policy = policy or coding_agent_policy()
        self.ws_turns_per_connection = ws_turns_per_connection
        self.prefill_s_per_token = prefill_s_per_token
        self.ws_cache_size = ws_cache_size
        self.recorder = recorder or Recorder()
        self._sealer = _Sealer(secrets.token_bytes(32))
        self._stored: dict[str, list[Item]] = {}  # responses kept because `store` was not false
        self._issued: dict[str, tuple[list[str], bool]] = {}  # reasoning id -> (summary, stored)
        self._prompt_cache = _PromptCache()
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/v1/responses", self._http, methods=["POST"]),
                WebSocketRoute("/v1/responses", self._websocket),
            ]
        )

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}{secrets.token_hex(12)}"

    # -- transports --

    async def _http(self, request: Request) -> Response:
        raw = await request.body()
        headers = dict(request.headers)
        if headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        stream = isinstance(body, dict) and bool(body.get("stream"))
        record = UpstreamRequest("sse" if stream else "http", len(raw), body, headers)
        try:
            turn = self._prepare(body, record, connection=None)
        except ApiError as exc:
            return JSONResponse({"error": exc.error}, status_code=exc.status)
        if not stream:
            final: dict[str, Any] = {}
            async for event in self._run(turn):
                final = event
            return JSONResponse(final["response"])

        async def sse() -> AsyncIterator[bytes]:
            async for event in self._run(turn):
                yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    async def _websocket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        headers = dict(websocket.headers)
        with self.recorder._lock:
            self.recorder.ws_connections.append(headers)
        connection: OrderedDict[str, list[Item]] = OrderedDict()
        turns = 0
        while True:
            try:
                frame = await websocket.receive()
            except WebSocketDisconnect:
                return
            if frame["type"] == "websocket.disconnect":
                return
            text = frame.get("text")
            if text is None:
                text = (frame.get("bytes") or b"").decode(errors="replace")
            record = UpstreamRequest("ws", len(text.encode()), text, {})
            try:
                event = json.loads(text)
            except ValueError:
                event = None
            if not isinstance(event, dict) or event.get("type") != "response.create":
                record.error = "invalid_request"
                self.recorder._add(record)
                await websocket.send_text(
                    json.dumps(
                        _error_event(ApiError(400, "invalid_request", "Expected a response.create event."))
                    )
                )
                continue
            body = {k: v for k, v in event.items() if k != "type"}
            record.body = body
            try:
                turn = self._prepare(body, record, connection=connection)
            except ApiError as exc:
                await websocket.send_text(json.dumps(_error_event(exc)))
                continue
            try:
                async for out in self._run(turn, connection=connection):
                    await websocket.send_text(json.dumps(out))
            except WebSocketDisconnect:
                return
            turns += 1
            if self.ws_turns_per_connection is not None and turns >= self.ws_turns_per_connection:
                await websocket.close(code=1000)
                return

    # -- one response --

    def _prepare(
        self, body: Any, record: UpstreamRequest, connection: OrderedDict[str, list[Item]] | None
    ) -> _Turn:
        """Validate and resolve the request's history; refusals are recorded and raised."""
        self.recorder._add(record)
        try:
            return self._resolve(body, record, connection)
        except ApiError as exc:
            record.error = str(exc.error["code"])
            raise

    def _resolve(
        self, body: Any, record: UpstreamRequest, connection: OrderedDict[str, list[Item]] | None
    ) -> _Turn:
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
        items = _input_items(body.get("input"))
        prev = body.get("previous_response_id")
        record.input_items = len(items)
        record.previous_response_id = prev
        record.generate = body.get("generate") is not False
        earlier: list[Item] = []
        if prev is not None:
            found = self._lookup(str(prev), body, connection)
            if found is None:
                raise ApiError(
                    400,
                    "previous_response_not_found",
                    f"Previous response with id '{prev}' not found.",
                    "previous_response_id",
                )
            earlier = found
        for item in earlier:
            if item_type(item) == "reasoning":
                record.reasoning_checks.append(self._check(item, "previous_response_id"))
        for item in items:
            if item_type(item) == "reasoning":
                check = self._check(item, "input")
                record.reasoning_checks.append(check)
                if not check.ok:
                    raise ApiError(
                        400,
                        "invalid_encrypted_content",
                        f"The encrypted content for item {item.get('id')} could not be verified "
                        f"({check.reason}).",
                        "input",
                    )
        history = [*earlier, *items]
        prefix = json.dumps([body.get("instructions"), body.get("tools")], sort_keys=True)
        digests, tokens = _PromptCache.chain(prefix, history)
        record.history_items = len(history)
        record.history = history
        record.history_text_chars = len(prefix) + sum(len(_visible_text(i)) for i in history)
        return _Turn(
            body=body,
            record=record,
            history=history,
            input_tokens=tokens[-1],
            cached_tokens=self._prompt_cache.cached(_cache_key(body), digests),
            response_id=self._id("resp"),
            chain_digests=digests,
        )

    def _lookup(
        self, prev: str, body: dict[str, Any], connection: OrderedDict[str, list[Item]] | None
    ) -> list[Item] | None:
        if connection is not None and prev in connection:
            connection.move_to_end(prev)
            return connection[prev]
        # Beyond the socket's own cache (or over HTTP) only stored responses can be continued.
        if body.get("store") is False and connection is None:
            return None
        return self._stored.get(prev)

    def _check(
        self, item: Mapping[str, Any], via: Literal["input", "previous_response_id"]
    ) -> ReasoningCheck:
        item_id = str(item.get("id", ""))
        token = item.get("encrypted_content")
        if not token:
            # Without the sealed copy only the server's own state can vouch for the item: the
            # chain it holds, or a stored response (`store` not false), by id.
            issued = self._issued.get(item_id)
            if issued is not None and (via == "previous_response_id" or issued[1]):
                if issued[0] == _summary_texts(item):
                    return ReasoningCheck(item_id, via, True)
                return ReasoningCheck(item_id, via, False, "summary changed")
            return ReasoningCheck(item_id, via, False, "no encrypted_content and not stored")
        payload = self._sealer.open(str(token))
        if payload is None:
            return ReasoningCheck(item_id, via, False, "not sealed by this upstream")
        if payload.get("id") != item_id:
            return ReasoningCheck(item_id, via, False, f"sealed for {payload.get('id')}")
        if payload.get("summary") != _summary_texts(item):
            return ReasoningCheck(item_id, via, False, "summary changed")
        return ReasoningCheck(item_id, via, True)

    async def _run(
        self, turn: _Turn, connection: OrderedDict[str, list[Item]] | None = None
    ) -> AsyncIterator[dict]:
        """The stream events of one response, numbered; state is saved at the end."""
        body, seq = turn.body, itertools.count()
        response = self._response_object(turn)
        emitted: list[dict[str, Any]] = []

        def numbered(event: dict[str, Any]) -> dict[str, Any]:
            event = {"type": event.pop("type"), "sequence_number": next(seq), **event}
            emitted.append(event)
            return event

        yield numbered({"type": "response.created", "response": copy.deepcopy(response)})
        yield numbered({"type": "response.in_progress", "response": copy.deepcopy(response)})
        uncached = turn.input_tokens - turn.cached_tokens
        if self.prefill_s_per_token > 0 and uncached > 0:
            await asyncio.sleep(self.prefill_s_per_token * uncached)
        specs = self.policy(copy.deepcopy(turn.history), copy.deepcopy(body)) if turn.record.generate else []
        include_sealed = ENCRYPTED_REASONING in (body.get("include") or [])
        output: list[Item] = []
        visible_tokens = reasoning_tokens = 0
        for index, spec in enumerate(specs):
            item, events, hidden = self._materialize(spec, index, include_sealed)
            for event in events:
                yield numbered(event)
            output.append(item)
            reasoning_tokens += hidden
            if item["type"] != "reasoning":
                visible_tokens += count_tokens(_visible_text(item))
        history = [*turn.history, *output]
        response.update(status="completed", completed_at=int(time.time()), output=output)
        response["usage"] = {
            "input_tokens": turn.input_tokens,
            # Everything not read from the cache was written to it.
            "input_tokens_details": {
                "cached_tokens": turn.cached_tokens,
                "cache_write_tokens": turn.input_tokens - turn.cached_tokens,
            },
            "output_tokens": visible_tokens + reasoning_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": turn.input_tokens + visible_tokens + reasoning_tokens,
        }
        # The output joins the cached prefix, as a KV cache holds the generated tokens too.
        prefix = json.dumps([body.get("instructions"), body.get("tools")], sort_keys=True)
        self._prompt_cache.add(_cache_key(body), *_PromptCache.chain(prefix, history))
        if connection is not None:
            connection[turn.response_id] = history
            while len(connection) > self.ws_cache_size:
                connection.popitem(last=False)
        if body.get("store") is not False:
            self._stored[turn.response_id] = history
        for item in output:
            if item["type"] == "reasoning":
                self._issued[item["id"]] = (_summary_texts(item), body.get("store") is not False)
        turn.record.response_id = turn.response_id
        turn.record.usage = response["usage"]
        final = numbered({"type": "response.completed", "response": response})
        self.recorder._finish(turn.record, copy.deepcopy(response), emitted)
        yield final

    def _response_object(self, turn: _Turn) -> dict[str, Any]:
        body = turn.body
        reasoning_config = {"effort": "medium", "summary": None, **(body.get("reasoning") or {})}
        text_config = {"format": {"type": "text"}, "verbosity": "medium", **(body.get("text") or {})}
        tier = body.get("service_tier")
        response: dict[str, Any] = {
            "id": turn.response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "max_tool_calls": None,
            "metadata": {},
            "model": body.get("model"),
            "output": [],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "prompt_cache_key": None,
            "prompt_cache_retention": None,
            "safety_identifier": None,
            "store": True,
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": None,
            "user": None,
        }
        response.update({k: copy.deepcopy(v) for k, v in body.items() if k not in _NOT_ECHOED})
        response.update(
            id=turn.response_id,
            object="response",
            status="in_progress",
            output=[],
            usage=None,
            reasoning=reasoning_config,
            text=text_config,
            # "auto" (or nothing) is resolved to the tier that served the request.
            service_tier="default" if tier in (None, "auto") else tier,
        )
        return response

    def _materialize(self, spec: Mapping[str, Any], index: int, sealed: bool) -> tuple[Item, list[dict], int]:
        """The finished item for a spec, its stream events, and its hidden reasoning tokens."""
        kind = spec.get("type")
        extra = {k: copy.deepcopy(v) for k, v in spec.items() if k not in _SPEC_KEYS}
        if kind == "reasoning":
            return self._reasoning(spec, index, sealed)
        if kind == "message":
            return (*_message(self._id("msg"), spec, index, extra), 0)
        if kind == "function_call":
            item_id, call_id = self._id("fc"), str(spec.get("call_id") or self._id("call"))
            item = {
                "id": item_id,
                "type": "function_call",
                "status": "completed",
                "arguments": spec["arguments"],
            }
            item.update(call_id=call_id, name=spec["name"], **extra)
            added = {**item, "status": "in_progress", "arguments": ""}
            deltas = [
                _ev("response.function_call_arguments.delta", item_id, index, delta=d)
                for d in _chunks(item["arguments"])
            ]
            done = _ev("response.function_call_arguments.done", item_id, index, arguments=item["arguments"])
            return item, [_added(added, index), *deltas, done, _done(item, index)], 0
        if kind == "custom_tool_call":
            item_id, call_id = self._id("ctc"), str(spec.get("call_id") or self._id("call"))
            item = {"id": item_id, "type": "custom_tool_call", "status": "completed", "call_id": call_id}
            item.update(name=spec["name"], input=spec["input"], **extra)
            added = {**item, "status": "in_progress", "input": ""}
            deltas = [
                _ev("response.custom_tool_call_input.delta", item_id, index, delta=d)
                for d in _chunks(item["input"])
            ]
            done = _ev("response.custom_tool_call_input.done", item_id, index, input=item["input"])
            return item, [_added(added, index), *deltas, done, _done(item, index)], 0
        raise ValueError(f"the policy returned an item of unknown type {kind!r}")

    def _reasoning(self, spec: Mapping[str, Any], index: int, sealed: bool) -> tuple[Item, list[dict], int]:
        item_id = self._id("rs")
        texts = [str(s) for s in spec.get("summary") or []]
        hidden = int(spec.get("reasoning_tokens") or 4 * max(1, count_tokens(" ".join(texts))))
        item: Item = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t} for t in texts],
        }
        if sealed:
            item["encrypted_content"] = self._sealer.seal({"id": item_id, "summary": texts, "tokens": hidden})
        events: list[dict] = [_added({"id": item_id, "type": "reasoning", "summary": []}, index)]
        for n, text in enumerate(texts):
            part = {"type": "summary_text", "text": ""}
            events.append(
                _ev("response.reasoning_summary_part.added", item_id, index, summary_index=n, part=part)
            )
            for delta in _chunks(text):
                events.append(
                    _ev("response.reasoning_summary_text.delta", item_id, index, summary_index=n, delta=delta)
                )
            events.append(
                _ev("response.reasoning_summary_text.done", item_id, index, summary_index=n, text=text)
            )
            done_part = {"type": "summary_text", "text": text}
            events.append(
                _ev("response.reasoning_summary_part.done", item_id, index, summary_index=n, part=done_part)
            )
        events.append(_done(item, index))
        return item, events, hidden


_SPEC_KEYS = frozenset(
    {"type", "summary", "reasoning_tokens", "text", "annotations", "name", "arguments", "input", "call_id"}
)


def _message(
    item_id: str, spec: Mapping[str, Any], index: int, extra: dict[str, Any]
) -> tuple[Item, list[dict]]:
    text, annotations = str(spec["text"]), [dict(a) for a in spec.get("annotations") or []]
    part = {"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}
    item = {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part],
        **extra,
    }
    added = {**item, "status": "in_progress", "content": []}
    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    events = [
        _added(added, index),
        _ev("response.content_part.added", item_id, index, content_index=0, part=empty),
    ]
    events += [
        _ev("response.output_text.delta", item_id, index, content_index=0, delta=d, logprobs=[])
        for d in _chunks(text)
    ]
    events += [
        _ev(
            "response.output_text.annotation.added",
            item_id,
            index,
            content_index=0,
            annotation_index=n,
            annotation=a,
        )
        for n, a in enumerate(annotations)
    ]
    events.append(_ev("response.output_text.done", item_id, index, content_index=0, text=text, logprobs=[]))
    events.append(_ev("response.content_part.done", item_id, index, content_index=0, part=part))
    events.append(_done(item, index))
    return item, events


def _ev(kind: str, item_id: str, index: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "item_id": item_id, "output_index": index, **fields}


def _added(item: Item, index: int) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": copy.deepcopy(item)}


def _done(item: Item, index: int) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": copy.deepcopy(item)}


def _chunks(text: str, size: int = 12) -> list[str]:
    """Deltas of about `size` characters (at least one, even for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _error_event(exc: ApiError) -> dict[str, Any]:
    return {"type": "error", "status": exc.status, "error": exc.error}


def _cache_key(body: Mapping[str, Any]) -> str:
    return str(body.get("prompt_cache_key") or body.get("model") or "")


def _input_items(value: Any) -> list[Item]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        raise ApiError(400, "invalid_value", "input must be a string or a list of items.", "input")
    return [{"type": "message", **i} if "type" not in i and "role" in i else i for i in value]


# --- running it ------------------------------------------------------------------------------


def _uvicorn_server(app: Any, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws="websockets-sansio",
        ws_max_size=64 * 1024 * 1024,
    )
    return uvicorn.Server(config)


@contextlib.asynccontextmanager
async def async_running_reasoning_upstream(
    policy: Policy | None = None, prefill_s_per_token: float = 0.0, **kwargs: Any
) -> AsyncIterator[tuple[str, Recorder]]:
    """Serve a `ReasoningUpstream` on a free 127.0.0.1 port in this event loop; yields
    (base URL ending in /v1, recorder)."""
    upstream = ReasoningUpstream(policy, prefill_s_per_token, **kwargs)
    port = free_port()
    server = _uvicorn_server(upstream.app, port)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the reasoning upstream exited during startup")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1", upstream.recorder
    finally:
        server.should_exit = True
        await task


@contextlib.contextmanager
def running_reasoning_upstream(
    policy: Policy | None = None, prefill_s_per_token: float = 0.0, **kwargs: Any
) -> Iterator[tuple[str, Recorder]]:
    """`async_running_reasoning_upstream` in a background thread with its own event loop."""
    with in_thread(
        lambda: async_running_reasoning_upstream(policy, prefill_s_per_token, **kwargs),
        name="reasoning-upstream",
        start_seconds=30,
    ) as running:
        yield running


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tests.support.reasoning_upstream [--port N] [--prefill-s-per-token S]`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--prefill-s-per-token", type=float, default=0.0)
    args = parser.parse_args(argv)
    port = args.port or free_port()
    upstream = ReasoningUpstream(prefill_s_per_token=args.prefill_s_per_token)
    print(f"reasoning upstream on http://127.0.0.1:{port}/v1", flush=True)
    _uvicorn_server(upstream.app, port).run()


if __name__ == "__main__":
    main()
