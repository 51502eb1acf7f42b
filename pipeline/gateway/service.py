"""One response, end to end: gate, upstream stream, events, post-inference work.

`ResponsesService.create` is shared by the HTTP, SSE and WebSocket transports: it
resolves the history (by `previous_response_id`, by `conversation`, or from the full
history a stateless client resent), runs the gate lane before calling the upstream
model, forwards the model's stream events to the client as the model produced them
(only the response id is the gateway's, so continuations resolve here, and the final
response carries the `safety` object), and queues the post-inference work (output
scoring, billing with the model's usage) after `response.completed` without waiting.

State is per tenant, whatever the transport: a WebSocket turn may continue a response
created over HTTP or on another socket. A stateless client's resent history keeps one
conversation identity (the hash chain finds the conversation of its longest known
prefix), so billing, flags and the repeated-block lock-out apply per conversation.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from deltaguard.errors import PreviousResponseNotFound, RequestError, SafetyBlocked, UpstreamError
from deltaguard.events import DEFAULT_TENANT
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.upstreams import TERMINAL_EVENTS, Upstream, UpstreamCall
from deltaguard.gateway.wire import CreateRequest, new_id, response_object
from deltaguard.items import SYNTHETIC_TYPES, TOOL_DEFINITIONS, Item, canonical_json
from deltaguard.lanes.output_stream import OutputStreamScorer, new_categories
from deltaguard.lanes.stage import GateResult, SafetyStage
from deltaguard.parsing import instructions_item, parse_item, parse_items
from deltaguard.state.scoring import chain_of
from deltaguard.state.store import LruTtlMap
from deltaguard.usage import usage_from

Emit = Callable[[dict[str, Any]], Awaitable[None]]

_LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress", *TERMINAL_EVENTS})


def not_found(response_id: str) -> RequestError:
    return RequestError(
        f"Previous response with id '{response_id}' not found.",
        code="previous_response_not_found",
        param="previous_response_id",
    )


def conversation_not_found(conversation_id: str) -> RequestError:
    return RequestError(
        f"Conversation with id '{conversation_id}' not found.",
        code="conversation_not_found",
        param="conversation",
        status=404,
    )


@dataclass
class ConversationEntry:
    """A Conversations API conversation: its newest response (None before any)."""

    id: str
    created_at: int
    metadata: dict[str, Any] = field(default_factory=dict)
    last_response_id: str | None = None


@dataclass(frozen=True, slots=True)
class _Turn:
    gate: GateResult
    history: list[Item]  # every item the model is sent, oldest first
    new: list[Item]  # the suffix of `history` after `parent`
    parent: str | None  # the upstream's id of the response this turn continues
    tools: list[dict[str, Any]] | None  # the tools in effect (the request's or inherited)
    instructions: str | None = None  # the request's `instructions`


def _tool_definitions(tools: list[dict[str, Any]] | None) -> Item | None:
    """Tool definitions as one untrusted item, scored when they change (descriptions and
    schemas are a known tool-poisoning channel). Never forwarded to the model."""
    if not tools:
        return None
    return parse_item({"type": TOOL_DEFINITIONS, "tools": tools})


def _instructions_digest(instructions: str | None) -> bytes:
    return hashlib.sha256(canonical_json(instructions or "")).digest()


def _wire(items: Sequence[Item]) -> list[dict[str, Any]]:
    return [i.to_wire() for i in items if i.kind not in SYNTHETIC_TYPES]


class ResponsesService:
    def __init__(self, config: GatewayConfig, stage: SafetyStage, upstream: Upstream) -> None:
        self.config = config
        self.stage = stage
        self.upstream = upstream
        limits = stage.config.store
        n, ttl = limits.max_responses, limits.ttl_s
        # Per response: its tools (carried to continuations that do not resend them) and
        # their digest (so unchanged definitions are not scored again).
        self._tools: LruTtlMap[tuple[str, str], list[dict[str, Any]] | None] = LruTtlMap(n, ttl)
        self._tools_digest: LruTtlMap[tuple[str, str], bytes] = LruTtlMap(n, ttl)
        # Per response: the digest of its `instructions` (scored again only when they change).
        self._instructions_digest: LruTtlMap[tuple[str, str], bytes] = LruTtlMap(n, ttl)
        # The upstream's id of each response, by the gateway's id and by the hash chain of
        # the history it ends (output included): what a continuation hands the upstream.
        self._upstream_ids: LruTtlMap[tuple[str, str], str] = LruTtlMap(n, ttl)
        self._upstream_at: LruTtlMap[tuple[str, bytes], str] = LruTtlMap(n, ttl)
        self.conversations: LruTtlMap[tuple[str, str], ConversationEntry] = LruTtlMap(n, ttl)
        self.inflight = 0

    # -- conversations (the Conversations API) -----------------------------------------

    async def create_conversation(
        self, items: list[Item], metadata: dict[str, Any] | None, tenant: str = DEFAULT_TENANT
    ) -> ConversationEntry:
        """A new conversation; its initial items are gated like a turn's input."""
        entry = ConversationEntry(new_id("conv"), int(time.time()), dict(metadata or {}))
        if items:
            response_id = new_id("resp")
            gate = await self.stage.check_turn(response_id, items, None, entry.id, tenant=tenant)
            if gate.blocked:
                raise SafetyBlocked(gate.blocked_categories)
            entry.last_response_id = response_id
        self.conversations.put((tenant, entry.id), entry)
        return entry

    def conversation(self, conversation_id: str, tenant: str = DEFAULT_TENANT) -> ConversationEntry:
        entry = self.conversations.get((tenant, conversation_id))
        if entry is None:
            raise conversation_not_found(conversation_id)
        return entry

    def conversation_items(self, conversation_id: str, tenant: str = DEFAULT_TENANT) -> list[dict[str, Any]]:
        entry = self.conversation(conversation_id, tenant)
        if entry.last_response_id is None:
            return []
        record = self.stage.gate_tracker(tenant).store.record(entry.last_response_id)
        return _wire(record.history())

    def delete_conversation(self, conversation_id: str, tenant: str = DEFAULT_TENANT) -> None:
        self.conversation(conversation_id, tenant)
        self.conversations.discard((tenant, conversation_id))

    # -- the gate ------------------------------------------------------------------------

    def _parent_of_history(self, tenant: str, items: Sequence[Item]) -> tuple[str | None, int]:
        """The upstream response whose history is the longest prefix of `items`, and its length."""
        chains = chain_of(items)
        for k in range(len(chains), 0, -1):
            upstream_id = self._upstream_at.get((tenant, chains[k - 1]))
            if upstream_id is not None:
                return upstream_id, k
        return None, 0

    async def _gate(self, req: CreateRequest, response_id: str, tenant: str) -> _Turn:
        """Run the gate lane on the turn; resolve its history and what the upstream needs."""
        prev = req.previous_response_id
        conversation_id = None
        if req.conversation is not None:
            prev = self.conversation(req.conversation, tenant).last_response_id
            conversation_id = req.conversation
        tools = req.tools if req.tools is not None or prev is None else self._tools.get((tenant, prev))
        digest = hashlib.sha256(canonical_json(tools or [])).digest()
        changed = digest != (self._tools_digest.get((tenant, prev)) if prev else None)
        definitions = _tool_definitions(tools) if changed else None
        # The client's instructions are judged like its system messages, once per change.
        said = _instructions_digest(req.instructions)
        instructed = said != (self._instructions_digest.get((tenant, prev)) if prev else None)
        instructions = instructions_item(req.instructions) if req.instructions and instructed else None
        synthetic = [item for item in (definitions, instructions) if item is not None]
        if prev is None and conversation_id is None:
            # A stateless client: its whole history, tool definitions and instructions first.
            items = [*synthetic, *req.items]
            gate = await self.stage.check_history(response_id, items, tenant=tenant)
            parent, k = self._parent_of_history(tenant, items)
            return _Turn(gate, items, items[k:], parent, tools, req.instructions)
        history: list[Item] = []
        if prev is not None:
            try:
                history = list(self.stage.gate_tracker(tenant).store.record(prev).history())
            except PreviousResponseNotFound:
                raise not_found(prev) from None
        new = [*synthetic, *req.items]
        try:
            gate = await self.stage.check_turn(response_id, new, prev, conversation_id, tenant=tenant)
        except PreviousResponseNotFound:
            raise not_found(prev or "") from None
        parent = self._upstream_ids.get((tenant, prev)) if prev else None
        return _Turn(gate, [*history, *new], new, parent, tools, req.instructions)

    # -- one response ----------------------------------------------------------------------

    async def create(
        self, req: CreateRequest, emit: Emit | None = None, tenant: str = DEFAULT_TENANT
    ) -> dict[str, Any]:
        """Run one response for `tenant`. Raises `RequestError` (incl. `SafetyBlocked`)
        before any event; previous responses are looked up in the tenant's own state."""
        if self.inflight >= self.config.max_inflight_responses:
            raise RequestError(
                f"the gateway has {self.inflight} responses in flight, its limit; retry later",
                code="server_overloaded",
                status=503,
                type="server_error",
            )
        self.inflight += 1
        try:
            return await self._create(req, emit, tenant)
        finally:
            self.inflight -= 1

    def _rewrite(self, response: dict[str, Any], response_id: str, req: CreateRequest) -> dict[str, Any]:
        """The upstream's response object as the client must see it: the gateway's id (which
        continuations name) and the client's own state references; nothing else changes."""
        out = {**response, "id": response_id, "previous_response_id": req.previous_response_id}
        if req.conversation is not None:
            out["conversation"] = {"id": req.conversation}
        return out

    async def _create(self, req: CreateRequest, emit: Emit | None, tenant: str) -> dict[str, Any]:
        response_id = new_id("resp")
        turn = await self._gate(req, response_id, tenant)
        gate = turn.gate
        if gate.blocked:
            raise SafetyBlocked(gate.blocked_categories)
        self.stage.metrics.observe_items("input", turn.new)
        call = UpstreamCall(
            body=req.upstream_body(),
            history=_wire(turn.history),
            new_items=_wire(turn.new),
            parent=turn.parent,
            conversation=f"{tenant}\x1f{gate.conversation_id}",
            generate=req.generate,
            tools=turn.tools,
        )
        seq = 0

        async def send(event: dict[str, Any]) -> None:
            nonlocal seq
            if emit is not None:
                event.setdefault("sequence_number", seq)
                seq = int(event["sequence_number"]) + 1
                await emit(event)

        watch = OutputStreamScorer(
            [c for c in self.stage.gate_scorer.classifiers if c.name in self.config.output_stream_classifiers]
        )
        last: dict[str, Any] | None = None  # the newest response object seen
        try:
            async for event in _with_stall_timeout(
                self.upstream.stream(call), self.config.upstream_stall_timeout_s
            ):
                kind = event.get("type")
                if kind in _LIFECYCLE and isinstance(event.get("response"), dict):
                    upstream_response = event["response"]
                    last = self._rewrite(upstream_response, response_id, req)
                    if kind in ("response.completed", "response.incomplete"):
                        return await self._complete(req, turn, event, upstream_response, last, send, tenant)
                    event = {**event, "response": last}
                    await send(event)
                    if kind == "response.failed":
                        if emit is None:
                            error = (last.get("error") or {}).get("message", "the model failed")
                            raise RequestError(
                                str(error), code="upstream_error", status=502, type="server_error"
                            )
                        return last
                    continue
                if kind == "response.output_text.delta":
                    await self._watch_output(gate, watch, watch.feed(str(event.get("delta", ""))))
                await send(event)
            raise UpstreamError("upstream stream ended before response.completed")
        except UpstreamError as exc:
            # The turn's input is already part of the conversation's history (a retry
            # continues from the same previous response); nothing of the output is.
            err = RequestError(str(exc), code="upstream_error", status=502, type="server_error")
            failed = {
                **(last or response_object(response_id, req, status="failed", output=[])),
                "status": "failed",
                "error": {"code": "upstream_error", "message": str(exc)},
            }
            await send({"type": "response.failed", "response": failed})
            if emit is None:
                raise err from exc
            return failed

    async def _complete(
        self,
        req: CreateRequest,
        turn: _Turn,
        event: dict[str, Any],
        upstream_response: dict[str, Any],
        final: dict[str, Any],
        send: Emit,
        tenant: str,
    ) -> dict[str, Any]:
        gate = turn.gate
        response_id = gate.response_id
        final["safety"] = safety_summary(gate)
        output = [o for o in upstream_response.get("output") or [] if isinstance(o, dict)]
        output_items = parse_items(output, "output")
        # History first (cheap, no scoring), so that an immediate continuation sees it.
        await self.stage.append_output(gate, output_items)
        await send({**event, "response": final})
        # After response.completed: queued, overlapped with the client's next request.
        upstream_id = upstream_response.get("id")
        if isinstance(upstream_id, str):
            self._upstream_ids.put((tenant, response_id), upstream_id)
            chain = self.stage.gate_tracker(tenant).record(response_id).chain
            self._upstream_at.put((tenant, chain), upstream_id)
        self._tools.put((tenant, response_id), turn.tools)
        self._tools_digest.put(
            (tenant, response_id), hashlib.sha256(canonical_json(turn.tools or [])).digest()
        )
        self._instructions_digest.put((tenant, response_id), _instructions_digest(turn.instructions))
        if req.conversation is not None:
            entry = self.conversations.get((tenant, req.conversation))
            if entry is not None:
                entry.last_response_id = response_id
        self.stage.metrics.observe_items("output", output_items)
        if req.generate:
            await self.stage.complete_turn(
                gate, output_items, usage_from(upstream_response.get("usage"), "responses")
            )
        return final

    async def _watch_output(self, gate: GateResult, watch: OutputStreamScorer, found: list[Any]) -> None:
        flagged = new_categories(found, gate.verdict.flagged_categories)
        if flagged:
            await self.stage.flag_output(gate, flagged, dict(watch.scores))


async def _with_stall_timeout(
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
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


def safety_summary(gate: GateResult) -> dict[str, Any]:
    """The gate lane's verdict, attached to the response as an extra `safety` field."""
    v = gate.verdict
    return {
        "decision": v.decision,
        "flagged_categories": v.flagged_categories,
        "category_scores": {k: round(s, 6) for k, s in v.category_scores.items()},
        "latency_ms": {k: round(ms, 4) for k, ms in v.latency_ms.items()},
        "tokens_scored": v.tokens_scored,
    }
