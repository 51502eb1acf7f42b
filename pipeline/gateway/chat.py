"""`POST /v1/chat/completions` on the gateway: JSON or SSE, forwarded to a chat upstream.

Chat clients resend the whole conversation with every request and hold no id, so each
request is gated with `SafetyStage.begin(history=...)`: the hash chain finds the longest
prefix already scored, only the rest is folded, and the store gives the request the
conversation identity of that prefix (billing, flags and the repeated-block lock-out
apply per conversation). Messages map to items canonically (`chat_items`), and the
model's answer is appended in the form the client will echo back, so the next request
continues the same chain.

Faithful pass-through: the body goes to the upstream as the client sent it (every
field, tools included), and every chunk or field the upstream sends reaches the client;
the gateway adds only a `safety` object (to the JSON response, and to the first chunk of
a stream). To bill a stream, the upstream is asked for its usage chunk
(`stream_options.include_usage`); a client that did not ask for it does not see it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from deltaguard.bounds import RequestLimits
from deltaguard.chat_items import ItemCache, chat_history_items, chat_output_items
from deltaguard.errors import ItemError, TurnBlocked, UpstreamError
from deltaguard.events import DEFAULT_TENANT
from deltaguard.gateway.body import BodyParser
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.error_exits import CLIENT_ERRORS, client_error
from deltaguard.gateway.http_errors import RequestError, invalid_item
from deltaguard.gateway.release import ActionBlocked, MonitorBlocked, ReleaseHold, release_hold
from deltaguard.gateway.service import end_user, safety_summary
from deltaguard.gateway.slots import Slots
from deltaguard.gateway.upstreams import ChatUpstream, HttpChatUpstream, SimulatedChatModel
from deltaguard.gateway.upstreams.transport import with_stall_timeout
from deltaguard.gateway.wire import check_sizes, new_id, optional_tools, parse_body
from deltaguard.items import TOOL_DEFINITIONS, Item
from deltaguard.lanes.stage import SafetyStage, Turn
from deltaguard.parsing import parse_item
from deltaguard.streams import close_source
from deltaguard.usage import usage_from

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A parsed `POST /v1/chat/completions` body."""

    body: dict[str, Any]  # as the client sent it: forwarded unchanged
    items: list[Item]  # the history to gate: tool definitions (when any), then the messages
    stream: bool
    include_usage: bool  # the client asked for the usage chunk


def build_chat_upstream(config: GatewayConfig) -> ChatUpstream:
    if config.upstream == "sim":
        return SimulatedChatModel(config.sim_tokens_per_s, config.sim_reply_tokens, config.sim_tool_calls)
    return HttpChatUpstream(config.upstream, config.upstream_api_key, config.upstream_timeout_s)


def parse_chat(body: dict[str, Any], limits: RequestLimits, *, cache: ItemCache | None = None) -> ChatRequest:
    """Validate a chat body; every refusal names the field at fault."""
    model = body.get("model")
    if model is None:
        raise RequestError("model is required", code="missing_required_parameter", param="model")
    if not isinstance(model, str):
        raise RequestError("model must be a string", code="invalid_type", param="model")
    messages = body.get("messages")
    if messages is None:
        raise RequestError("messages is required", code="missing_required_parameter", param="messages")
    if not isinstance(messages, list):
        raise RequestError("messages must be a list of messages", code="invalid_type", param="messages")
    if not messages:
        raise RequestError("messages must not be empty", code="invalid_value", param="messages")
    check_sizes(messages, "messages", limits)
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(
                f"messages[{i}] must be an object", code="invalid_type", param=f"messages[{i}]"
            )
        if message.get("role") not in _ROLES:
            raise RequestError(
                f"messages[{i}].role must be one of {', '.join(sorted(_ROLES))}",
                code="invalid_value",
                param=f"messages[{i}].role",
            )
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", code="invalid_type", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError("stream_options must be an object", code="invalid_type", param="stream_options")
    tools = optional_tools(body)
    try:
        items = chat_history_items(messages, cache=cache)
    except ItemError as exc:
        raise invalid_item(exc, "message") from None
    if tools:
        # Tool descriptions and schemas are untrusted (tool poisoning); first, so that
        # the same tools keep the history's prefix, and its scores, unchanged.
        items.insert(0, parse_item({"type": TOOL_DEFINITIONS, "tools": tools}))
    return ChatRequest(body, items, stream, bool(options and options.get("include_usage") is True))


class _Answer:
    """The assistant message a stream of chunks adds up to (choice 0, as the client keeps it)."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.finished = False
        self.fed_text = ""  # what the last chunk fed added

    def feed(self, chunk: dict[str, Any]) -> str:
        """Take one chunk; returns the answer text it adds."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        text = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self.finished = self.finished or choice.get("finish_reason") is not None
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                text += delta["content"]
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                entry = self.calls.setdefault(
                    int(call.get("index") or 0),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.get("id"):
                    entry["id"] = call["id"]
                fn = call.get("function") or {}
                entry["function"]["name"] += fn.get("name") or ""
                entry["function"]["arguments"] += fn.get("arguments") or ""
        self.content.append(text)
        self.fed_text = text
        return text

    def message(self) -> dict[str, Any]:
        calls = [self.calls[k] for k in sorted(self.calls)]
        text = "".join(self.content)
        return {
            "role": "assistant",
            "content": text or None,
            "refusal": "".join(self.refusal) or None,
            **({"tool_calls": calls} if calls else {}),
        }


class ChatService:
    """Gates chat requests, forwards them to the chat upstream, and completes their turns."""

    def __init__(
        self, config: GatewayConfig, stage: SafetyStage, upstream: ChatUpstream, slots: Slots
    ) -> None:
        self.config = config
        self.limits = config.request_limits
        self.stage = stage
        self.upstream = upstream
        # A resent history parses only the messages not seen before.
        self.items = ItemCache(max_bytes=config.item_cache_bytes)
        self.slots = slots
        self.body = BodyParser(stage, config.parse_inline_bytes)

    def parse(self, raw: bytes | str) -> ChatRequest:
        return parse_chat(parse_body(raw, self.limits), self.limits, cache=self.items)

    async def gate(self, req: ChatRequest, tenant: str = DEFAULT_TENANT) -> Turn:
        """The gate lane on the request's whole history; raises `TurnBlocked`."""
        # A slot is held while the gate scores and again while the upstream answers.
        with self.slots.hold(tenant, "chat completions"):
            turn = await self.stage.begin(
                tenant, history=req.items, response_id=new_id("chatcmpl"), client=end_user(req.body)
            )
        if turn.blocked:
            raise turn.gate.refusal()
        if turn.gate.sanitized or turn.upstream_history != turn.history:
            # The client's messages are forwarded as sent: what `sanitize` would cut out
            # cannot be, so it blocks here.
            raise TurnBlocked(turn.gate.sanitized or turn.gate.verdict.flagged_categories)
        return turn

    async def _finish(self, turn: Turn, message: Any, usage: Any) -> None:
        """The answer joins the history (before the client can resend it); scoring and
        billing are queued."""
        try:
            output = chat_output_items(message, self.items) if isinstance(message, dict) else []
        except ItemError:
            output = []  # an answer of a shape no client can echo: billed, not history
        await turn.finish(output, usage_from(usage, "chat"))

    async def complete(self, req: ChatRequest, turn: Turn) -> dict[str, Any]:
        """A JSON chat completion: the upstream's object, plus `safety`."""
        turn.generating()
        try:
            with self.slots.hold(turn.gate.tenant, "chat completions", admitted=True):
                response = await asyncio.wait_for(
                    self.upstream.complete(req.body), self.config.upstream_timeout_s + 1.0
                )
        except TimeoutError:
            raise UpstreamError("upstream did not answer in time") from None
        choices = response.get("choices") or []
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = first.get("message")
        hold = self._hold(turn)
        calls = _tool_calls(message)
        try:
            if hold is not None and hold.mode != "off" and (hold.mode == "all" or calls):
                blocked = await hold.judge(turn.monitor_verdict)
                if blocked:
                    raise MonitorBlocked(blocked)
            if hold is not None and hold.actions is not None:
                for i, call in enumerate(calls):
                    verdict = await hold.actions.check(call, i)
                    if verdict is not None and hold.actions.blocks:
                        raise ActionBlocked([hold.actions.policy.category], verdict.reason())
        except MonitorBlocked:  # the call never reaches the client; the upstream's usage is billed
            await turn.finish([], usage_from(response.get("usage"), "chat"))
            raise
        await self._finish(turn, message, response.get("usage"))
        return {**response, "safety": safety_summary(turn.gate)}

    def _hold(self, turn: Turn) -> ReleaseHold | None:
        """What of the answer waits for the monitor verdict or the action check (None: nothing)."""
        return release_hold(self.config, self.stage, turn, chat=True)

    async def stream(self, req: ChatRequest, turn: Turn) -> AsyncIterator[dict[str, Any]]:
        """The upstream's chunks, as it sent them (the first with `safety` added)."""
        body = req.body
        if not req.include_usage:
            body = {**body, "stream_options": {**(body.get("stream_options") or {}), "include_usage": True}}
        answer = _Answer()
        first = True
        turn.generating()
        chunks = with_stall_timeout(self.upstream.stream(body), self.config.upstream_stall_timeout_s)
        hold = self._hold(turn)
        if hold is not None:
            chunks = hold.stream(_fed(chunks, answer), turn.monitor_verdict)
        with self.slots.hold(turn.gate.tenant, "chat completions", admitted=True):
            try:
                async for chunk in chunks:
                    text = answer.feed(chunk) if hold is None else answer.fed_text
                    await turn.watch(text)
                    if not req.include_usage:
                        if chunk.get("usage") and not chunk.get("choices"):
                            continue  # the usage chunk only the gateway asked for
                        if "usage" in chunk and chunk["usage"] is None:
                            chunk = {k: v for k, v in chunk.items() if k != "usage"}
                    if first:
                        chunk = {**chunk, "safety": safety_summary(turn.gate)}
                        first = False
                    yield chunk
            except MonitorBlocked:
                # Cancelled (the upstream's stream is closed); billed for what it reported, or
                # for the input and the output it streamed so far.
                usage = answer.usage or {"prompt_tokens": sum(i.tokens for i in turn.history)}
                await turn.finish([], usage_from(usage, "chat"))
                raise
        if not answer.finished:
            raise UpstreamError("upstream stream ended before a finish_reason")
        await self._finish(turn, answer.message(), answer.usage)


class ChatEndpoint:
    """The route: tenant check, parsing, then JSON or SSE. A refusal, or the upstream's
    failure before the first chunk, is raised to the app's handler (`error_exits`): a
    JSON error; the upstream's own refusal reaches the client as it came."""

    def __init__(self, service: ChatService, tenant: Callable[[Any], str], metrics: Any) -> None:
        """`tenant`: the tenant of a request's headers, or the refusal of a wrong key."""
        self.service = service
        self.tenant = tenant
        self.metrics = metrics

    async def handle(self, request: Request) -> Response:
        request.state.transport = "chat"  # a refusal's count (`ErrorExits`), streamed or not
        tenant = self.tenant(request.headers)
        req = await self.service.body(self.service.parse, await request.body(), tenant)
        turn = await self.service.gate(req, tenant)
        if not req.stream:
            out = await self.service.complete(req, turn)
            self.metrics.requests.labels("chat", "ok").inc()
            return JSONResponse(out)
        chunks = aiter(self.service.stream(req, turn))
        try:
            first = await anext(chunks)  # so that a failure before any chunk is a plain HTTP error
        except StopAsyncIteration:
            raise UpstreamError("upstream sent no chunks") from None
        self.metrics.requests.labels("chat_sse", "ok").inc()
        return StreamingResponse(_sse(first, chunks), media_type="text/event-stream")


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    """A chat answer's tool calls as the action check reads calls (function_call items)."""
    if not isinstance(message, dict):
        return []
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if isinstance(message.get("function_call"), dict):
        calls.append({"function": message["function_call"]})
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c.get("function"), dict) else {}
        out.append(
            {
                "type": "function_call",
                "call_id": str(c.get("id") or ""),
                "name": str(fn.get("name") or ""),
                "arguments": str(fn.get("arguments") or ""),
            }
        )
    return out


async def _fed(chunks: AsyncIterator[dict[str, Any]], answer: _Answer) -> AsyncIterator[dict[str, Any]]:
    """`chunks`, each fed to `answer` as it arrives (before a hold), so that a cancelled
    answer's usage so far is known."""
    try:
        async for chunk in chunks:
            answer.feed(chunk)
            yield chunk
    finally:
        await close_source(chunks)


async def _sse(first: dict[str, Any], chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Chunks as `data:` lines, then `[DONE]`; a failure mid-stream is an `error` object,
    which the SDK raises as `APIError`."""
    try:
        yield f"data: {json.dumps(first)}\n\n".encode()
        async for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n".encode()
    except CLIENT_ERRORS as exc:  # the upstream failed, or the monitor's verdict blocked the answer
        yield f"data: {json.dumps({'error': client_error(exc).to_error()})}\n\n".encode()
        return
    yield b"data: [DONE]\n\n"
