"""One response, end to end: gate, upstream stream, events, post-inference work.

`ResponsesService.events` is shared by the HTTP, SSE and WebSocket transports (one
request in, one stream of events out; `create` runs it to the end for JSON clients): it
resolves the history (by `previous_response_id`, by `conversation`, or from the full
history a stateless client resent), runs the gate lane before calling the upstream
model, forwards the model's stream events to the client as the model produced them
(only the response id is the gateway's, so continuations resolve here, and the final
response carries the `safety` object), and, as the response completes, queues the
post-inference work (output scoring, billing with the model's usage) without waiting.

State is per tenant, whatever the transport: a WebSocket turn may continue a response
created over HTTP or on another socket. A stateless client's resent history keeps one
conversation identity (the hash chain finds the conversation of its longest known
prefix), so billing, flags and the repeated-block lock-out apply per conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from deltaguard.errors import PreviousResponseNotFound, TurnBlocked, UpstreamError
from deltaguard.events import DEFAULT_TENANT
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.error_exits import client_error
from deltaguard.gateway.http_errors import RequestError, upstream_failed
from deltaguard.gateway.release import MonitorBlocked, released
from deltaguard.gateway.slots import Slots
from deltaguard.gateway.upstreams import TERMINAL_EVENTS, Upstream, UpstreamCall
from deltaguard.gateway.upstreams.transport import with_stall_timeout
from deltaguard.gateway.wire import CreateRequest, new_id, response_object
from deltaguard.items import Item, count_tokens, wire_items
from deltaguard.lanes.stage import GateResult, SafetyStage, Turn
from deltaguard.lanes.turn import Forward
from deltaguard.state.scoring import findings_json
from deltaguard.state.tiers import StateMap
from deltaguard.streams import close_source
from deltaguard.usage import Usage, usage_from

log = logging.getLogger("deltaguard.gateway")

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


def _entry_bytes(entry: ConversationEntry) -> int:
    return 256 + len(json.dumps(entry.metadata, ensure_ascii=False))


def end_user(body: dict[str, Any]) -> str:
    """The end-user a request names (`safety_identifier`, or the older `user`); "" if none."""
    for key in ("safety_identifier", "user"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


class ResponsesService:
    def __init__(self, config: GatewayConfig, stage: SafetyStage, upstream: Upstream, slots: Slots) -> None:
        self.config = config
        self.stage = stage
        self.upstream = upstream
        limits = stage.config.store
        n, ttl = limits.max_responses, limits.ttl_s
        # What a response's continuations inherit (its tools, and the digests of its tools
        # and instructions, so unchanged ones are not scored again) and the upstream's id
        # of it are notes on the response's record in the stage (`Turn.finish`).
        # Conversations API entries live where the conversation state does (a replica
        # reads them from a shared backend first: another may have moved them on).
        self.conversations: StateMap[tuple[str, str], ConversationEntry] = StateMap(
            "api/conversations",
            max_entries=n,
            max_bytes=n * 512,
            ttl_s=ttl,
            encode=lambda e: json.dumps(dataclasses.asdict(e)),
            decode=lambda text: ConversationEntry(**json.loads(text)),
            size=_entry_bytes,  # a client's metadata counts as what it weighs
            backend=stage.config.state,
            fresh=True,
        )
        self.slots = slots
        self._settling: set[asyncio.Task[None]] = set()  # billing of responses clients left

    async def settle(self) -> None:
        """Wait for the billing of abandoned responses to be queued (before the lanes close)."""
        while self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)

    def _bill_abandoned(self, turn: Turn, usage: Usage) -> None:
        """A response whose client left mid-stream (a disconnect, a socket closed at
        shutdown): its upstream stream is closed, and it charged for what it generated
        until then, so that is billed. In a task of its own: the client's task is being
        cancelled or closed, and may not await."""

        async def bill() -> None:
            try:
                await turn.finish([], usage)
            except Exception:
                log.exception("billing of the abandoned response %s failed", turn.gate.response_id)

        task = asyncio.get_running_loop().create_task(bill())
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    # -- conversations (the Conversations API) -----------------------------------------

    async def create_conversation(
        self, items: list[Item], metadata: dict[str, Any] | None, tenant: str = DEFAULT_TENANT
    ) -> ConversationEntry:
        """A new conversation; its initial items are gated like a turn's input."""
        entry = ConversationEntry(new_id("conv"), int(time.time()), dict(metadata or {}))
        if items:
            turn = await self.stage.begin(
                tenant, new_items=items, conversation_id=entry.id, response_id=new_id("resp")
            )
            if turn.blocked:
                raise turn.gate.refusal()
            entry.last_response_id = turn.gate.response_id
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
        try:
            turn = self.stage.resume(tenant, entry.last_response_id)
        except PreviousResponseNotFound:
            raise conversation_not_found(conversation_id) from None
        return wire_items(turn.record.history())

    def delete_conversation(self, conversation_id: str, tenant: str = DEFAULT_TENANT) -> None:
        self.conversation(conversation_id, tenant)
        self.conversations.discard((tenant, conversation_id))

    # -- the gate ------------------------------------------------------------------------

    async def _begin(self, req: CreateRequest, tenant: str) -> Turn:
        """Gate the turn: continuing the response it names (by id or by conversation), or
        the whole history a stateless client resent. Tool definitions and instructions are
        judged when they change; a continuation without tools inherits its parent's."""
        prev, conversation_id = req.previous_response_id, req.conversation
        if conversation_id is not None:
            prev = self.conversation(conversation_id, tenant).last_response_id
        kind = "new_items" if prev is not None or conversation_id is not None else "history"
        try:
            return await self.stage.begin(
                tenant,
                previous_response_id=prev,
                conversation_id=conversation_id,
                response_id=req.response_id,
                client=end_user(req.body),
                tools=req.tools,
                instructions=req.instructions,
                **{kind: req.items},
            )
        except PreviousResponseNotFound:
            raise not_found(prev or "") from None

    # -- one response ----------------------------------------------------------------------

    async def create(self, req: CreateRequest, tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
        """Run one response to its end and return it (a JSON client). Raises `RequestError`,
        `TurnBlocked` (a refusal, or a block mid-response) or `UpstreamError`."""
        async with contextlib.aclosing(self.events(req, tenant)) as events:
            async for event in events:
                if event["type"] == "response.failed":
                    error = event["response"].get("error") or {}
                    if error.get("code") == "safety_blocked":  # the monitor's verdict, mid-response
                        raise TurnBlocked.from_error(error)
                    message = error.get("message", "the model failed")
                    raise upstream_failed(str(message))
                if event["type"] in ("response.completed", "response.incomplete"):
                    return dict(event["response"])
        raise upstream_failed("the response ended without a terminal event")

    async def events(
        self, req: CreateRequest, tenant: str = DEFAULT_TENANT
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Run one response for `tenant`: its stream events, numbered, the last of them
        terminal (completed, incomplete or failed). Raises `RequestError` or
        `TurnBlocked` before any event; previous responses are looked up in the
        tenant's own state."""
        with self.slots.hold(tenant, "responses"):
            seq = 0
            async with contextlib.aclosing(self._events(req, tenant)) as events:
                async for event in events:
                    event.setdefault("sequence_number", seq)
                    seq = int(event["sequence_number"]) + 1
                    yield event

    def _rewrite(self, response: dict[str, Any], response_id: str, req: CreateRequest) -> dict[str, Any]:
        """The upstream's response object as the client must see it: the gateway's id (which
        continuations name) and the client's own state references; nothing else changes."""
        out = {**response, "id": response_id, "previous_response_id": req.previous_response_id}
        if req.conversation is not None:
            out["conversation"] = {"id": req.conversation}
        return out

    async def _events(self, req: CreateRequest, tenant: str) -> AsyncGenerator[dict[str, Any], None]:
        turn = await self._begin(req, tenant)
        gate = turn.gate
        response_id = gate.response_id
        if gate.blocked:
            raise gate.refusal()
        tap = _UpstreamTap()

        def upstream(sent: Forward) -> AsyncIterator[dict[str, Any]]:
            """The upstream's events for what the turn sends it, as the hold releases them."""
            call = UpstreamCall(
                body=req.upstream_body,
                history=sent.history,
                new_items=sent.new_items,
                parent=sent.parent,
                conversation=f"{tenant}\x1f{gate.conversation_id}",
                generate=req.generate,
                tools=turn.tools,
                history_items=sent.history_items,
            )
            stalled = with_stall_timeout(self.upstream.stream(call), self.config.upstream_stall_timeout_s)
            return released(self.config, self.stage, turn, tap.events(stalled))

        last: dict[str, Any] | None = None  # the newest response object seen
        # Closed as this generator ends, whatever ends it: the upstream's stream with it.
        stream = contextlib.aclosing(turn.stream(upstream, _output_text, generate=req.generate))
        try:
            async with stream as events:
                async for event in events:
                    kind = event.get("type")
                    if kind in _LIFECYCLE and isinstance(event.get("response"), dict):
                        upstream_response = event["response"]
                        last = self._rewrite(upstream_response, response_id, req)
                        if kind in ("response.completed", "response.incomplete"):
                            yield await self._complete(req, turn, event, upstream_response, last)
                            return
                        yield {**event, "response": last}
                        if kind == "response.failed":
                            return
                        continue
                    yield event
            raise UpstreamError("upstream stream ended before response.completed")
        except UpstreamError as exc:
            # The turn's input is already part of the conversation's history (a retry
            # continues from the same previous response); nothing of the output is.
            failed = {
                **(last or response_object(response_id, req, status="failed", output=[])),
                "status": "failed",
                "error": upstream_failed(str(exc)).to_response_error(),
            }
            yield {"type": "response.failed", "response": failed}
        except (GeneratorExit, asyncio.CancelledError):
            # The client left: the upstream's stream closes with this generator.
            if req.generate and not turn.finished:
                self._bill_abandoned(turn, tap.usage(turn.history))
            raise
        except MonitorBlocked as blocked:
            # The generation is cancelled (the upstream's stream is closed); nothing of the
            # output joins the history; the upstream's usage is billed as it reported it,
            # or as far as it got when cancelled before reporting any.
            await turn.finish([], tap.usage(turn.history) if req.generate else None)
            failed = {
                **(last or response_object(response_id, req, status="failed", output=[])),
                "status": "failed",
                "output": [],
                "error": client_error(blocked).to_error(),
                "safety": {**safety_summary(turn.gate), "decision": "block", "monitor": blocked.categories},
            }
            yield {"type": "response.failed", "response": failed}

    async def _complete(
        self,
        req: CreateRequest,
        turn: Turn,
        event: dict[str, Any],
        upstream_response: dict[str, Any],
        final: dict[str, Any],
    ) -> dict[str, Any]:
        """The terminal event, once the turn is finished (its output, notes, billing)."""
        final["safety"] = safety_summary(turn.gate)
        output = [o for o in upstream_response.get("output") or [] if isinstance(o, dict)]
        upstream_id = upstream_response.get("id")
        # Before response.completed, so that an immediate continuation sees it all; output
        # scoring and billing are queued, overlapped with the client's next request.
        await turn.finish(
            output,
            usage_from(upstream_response.get("usage"), "responses") if req.generate else None,
            **({"upstream_id": upstream_id} if isinstance(upstream_id, str) else {}),
        )
        if req.conversation is not None:
            key = (turn.gate.tenant, req.conversation)
            entry = self.conversations.get(key)
            if entry is not None:
                entry.last_response_id = turn.gate.response_id
                self.conversations.put(key, entry)
        return {**event, "response": final}


class _UpstreamTap:
    """The upstream's events as they arrive, noting its newest usage and the text it
    streamed, so that a response cancelled mid-way is billed for what it cost."""

    def __init__(self) -> None:
        self._usage: Any = None
        self._streamed: list[str] = []  # counted only if the upstream never reports usage

    async def events(self, source: AsyncIterator[dict[str, Any]]) -> AsyncGenerator[dict[str, Any], None]:
        try:
            async for event in source:
                response = event.get("response")
                if isinstance(response, dict) and response.get("usage"):
                    self._usage = response["usage"]
                delta = event.get("delta")
                if isinstance(delta, str):
                    self._streamed.append(delta)
                yield event
        finally:
            await close_source(source)

    def usage(self, history: Sequence[Item]) -> Usage:
        """The upstream's usage, else DeltaGuard's count of the input and streamed output."""
        if self._usage is not None:
            return usage_from(self._usage, "responses")
        return Usage(sum(i.tokens for i in history), 0, sum(count_tokens(d) for d in self._streamed))


def _output_text(event: dict[str, Any]) -> str | None:
    """The piece of the model's answer a stream event carries (None: none)."""
    if event.get("type") == "response.output_text.delta":
        return str(event.get("delta", ""))
    return None


def safety_summary(gate: GateResult) -> dict[str, Any]:
    """The gate lane's verdict, attached to the response as an extra `safety` field."""
    v = gate.verdict
    return {
        "decision": v.decision,
        "flagged_categories": v.flagged_categories,
        "category_scores": {k: round(s, 6) for k, s in v.category_scores.items()},
        "latency_ms": {k: round(ms, 4) for k, ms in v.latency_ms.items()},
        "tokens_scored": v.tokens_scored,
        **({"findings": findings_json(v.findings)} if v.findings else {}),
    }
