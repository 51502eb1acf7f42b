"""One response, end to end: gate, upstream stream, events, post-inference work.

`ResponsesService.create` is shared by the HTTP, SSE and WebSocket transports: it
resolves the history (by `previous_response_id`, or the full history a stateless client
resent), runs the gate lane before calling the upstream model, streams the model's
output as Responses API events through `emit`, and queues the post-inference work
(output scoring, billing) after `response.completed` without waiting for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from deltaguard.classifiers.base import count_tokens
from deltaguard.errors import PreviousResponseNotFound, RequestError, SafetyBlocked, UpstreamError
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.upstream import FunctionCall, TextDelta, Upstream, UpstreamEvent
from deltaguard.gateway.wire import (
    CreateRequest,
    function_call_item,
    message_item,
    new_id,
    response_object,
    usage_object,
)
from deltaguard.items import Item
from deltaguard.lanes.output_stream import OutputStreamScorer
from deltaguard.lanes.stage import DEFAULT_TENANT, GateResult, SafetyStage, Usage
from deltaguard.parsing import parse_items
from deltaguard.state.store import LruTtlMap

Emit = Callable[[dict[str, Any]], Awaitable[None]]


def not_found(response_id: str) -> RequestError:
    return RequestError(
        f"Previous response with id '{response_id}' not found.",
        code="previous_response_not_found",
        param="previous_response_id",
    )


class ResponsesService:
    def __init__(self, config: GatewayConfig, stage: SafetyStage, upstream: Upstream) -> None:
        self.config = config
        self.stage = stage
        self.upstream = upstream
        limits = stage.config.store
        # Per response: its tools (carried to continuations that do not resend them) and
        # the tokens of its whole history (so usage never recounts history).
        self._tools: LruTtlMap[tuple[str, str], list[dict[str, Any]] | None] = LruTtlMap(
            limits.max_responses, limits.ttl_s
        )
        self.inflight = 0
        self._history_tokens: LruTtlMap[tuple[str, str], int] = LruTtlMap(limits.max_responses, limits.ttl_s)

    async def _gate(
        self, req: CreateRequest, response_id: str, tenant: str
    ) -> tuple[GateResult, list[Item], int]:
        """Run the gate lane; returns its result, the full history and its cached tokens."""
        if req.previous_response_id is None:
            gate = await self.stage.check_history(response_id, req.items, tenant=tenant)
            return gate, list(req.items), 0
        prev = req.previous_response_id
        try:
            record = self.stage.gate_tracker(tenant).store.record(prev)
        except PreviousResponseNotFound:
            raise not_found(prev) from None
        cached = self._history_tokens.get((tenant, prev))
        history = record.history()
        if cached is None:  # evicted: count once, it is not on the per-turn path normally
            cached = sum(count_tokens(i.text) for i in history)
        try:
            gate = await self.stage.check_turn(response_id, req.items, prev, tenant=tenant)
        except PreviousResponseNotFound:
            raise not_found(prev) from None
        if req.tools is None:
            req.tools = self._tools.get((tenant, prev))
        return gate, [*history, *req.items], cached

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

    async def _create(self, req: CreateRequest, emit: Emit | None, tenant: str) -> dict[str, Any]:
        response_id = new_id("resp")
        created_at = int(time.time())
        gate, history, cached_tokens = await self._gate(req, response_id, tenant)
        if gate.blocked:
            raise SafetyBlocked(gate.blocked_categories)
        input_tokens = cached_tokens + sum(count_tokens(i.text) for i in req.items)
        seq = 0

        async def send(event: dict[str, Any]) -> None:
            nonlocal seq
            if emit is not None:
                event["sequence_number"] = seq
                seq += 1
                await emit(event)

        await send(
            {
                "type": "response.created",
                "response": response_object(
                    response_id, req, status="in_progress", output=[], created_at=created_at
                ),
            }
        )
        await send(
            {
                "type": "response.in_progress",
                "response": response_object(
                    response_id, req, status="in_progress", output=[], created_at=created_at
                ),
            }
        )
        output: list[dict[str, Any]] = []
        output_tokens = 0
        watch = OutputStreamScorer(
            [c for c in self.stage.gate_scorer.classifiers if c.name in self.config.output_stream_classifiers]
        )
        text_parts: list[str] = []
        msg_id: str | None = None
        try:
            async for event in _with_stall_timeout(
                self.upstream.stream(req, history), self.config.upstream_stall_timeout_s
            ):
                if isinstance(event, TextDelta):
                    if msg_id is None:
                        msg_id = new_id("msg")
                        await send(
                            {
                                "type": "response.output_item.added",
                                "output_index": len(output),
                                "item": message_item(msg_id, "", status="in_progress"),
                            }
                        )
                        await send(
                            {
                                "type": "response.content_part.added",
                                "item_id": msg_id,
                                "output_index": len(output),
                                "content_index": 0,
                                "part": {"type": "output_text", "text": "", "annotations": []},
                            }
                        )
                    text_parts.append(event.text)
                    await self._watch_output(gate, watch, watch.feed(event.text))
                    await send(
                        {
                            "type": "response.output_text.delta",
                            "item_id": msg_id,
                            "output_index": len(output),
                            "content_index": 0,
                            "delta": event.text,
                            "logprobs": [],
                        }
                    )
                elif isinstance(event, FunctionCall):
                    if msg_id is not None:
                        await self._finish_message(send, output, msg_id, "".join(text_parts))
                        msg_id, text_parts = None, []
                    fc_id = new_id("fc")
                    index = len(output)
                    await send(
                        {
                            "type": "response.output_item.added",
                            "output_index": index,
                            "item": function_call_item(
                                fc_id, event.call_id, event.name, "", status="in_progress"
                            ),
                        }
                    )
                    await send(
                        {
                            "type": "response.function_call_arguments.delta",
                            "item_id": fc_id,
                            "output_index": index,
                            "delta": event.arguments,
                        }
                    )
                    await send(
                        {
                            "type": "response.function_call_arguments.done",
                            "item_id": fc_id,
                            "output_index": index,
                            "name": event.name,
                            "arguments": event.arguments,
                        }
                    )
                    item = function_call_item(fc_id, event.call_id, event.name, event.arguments)
                    output.append(item)
                    await send({"type": "response.output_item.done", "output_index": index, "item": item})
                else:
                    output_tokens = event.output_tokens
            if msg_id is not None:
                await self._finish_message(send, output, msg_id, "".join(text_parts))
            await self._watch_output(gate, watch, watch.flush())
        except UpstreamError as exc:
            # The turn's input is already part of the conversation's history (a retry
            # continues from the same previous response); nothing of the output is.
            err = RequestError(str(exc), code="upstream_error", status=502, type="server_error")
            failed = response_object(
                response_id,
                req,
                status="failed",
                output=output,
                created_at=created_at,
                error={"code": "upstream_error", "message": str(exc)},
            )
            await send({"type": "response.failed", "response": failed})
            if emit is None:
                raise err from exc
            return failed
        usage = usage_object(input_tokens, cached_tokens, output_tokens)
        final = response_object(
            response_id, req, status="completed", output=output, usage=usage, created_at=created_at
        )
        final["safety"] = safety_summary(gate)
        output_items = parse_items([_history_item(o) for o in output], "output")
        await self.stage.append_output(gate, output_items)  # history first: cheap, no scoring
        await send({"type": "response.completed", "response": final})
        # After response.completed: queued, overlapped with the client's next request.
        self._tools.put((tenant, response_id), req.tools)
        self._history_tokens.put(
            (tenant, response_id), input_tokens + sum(count_tokens(i.text) for i in output_items)
        )
        await self.stage.complete_turn(gate, output_items, Usage(input_tokens, cached_tokens, output_tokens))
        return final

    async def _watch_output(self, gate: GateResult, watch: OutputStreamScorer, found: list[Any]) -> None:
        flagged = sorted({f.category for f in found} - set(gate.verdict.flagged_categories))
        if flagged:
            await self.stage.flag_output(gate, flagged, dict(watch.scores))

    async def _finish_message(self, send: Emit, output: list[dict[str, Any]], msg_id: str, text: str) -> None:
        index = len(output)
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        await send(
            {
                "type": "response.output_text.done",
                "item_id": msg_id,
                "output_index": index,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            }
        )
        await send(
            {
                "type": "response.content_part.done",
                "item_id": msg_id,
                "output_index": index,
                "content_index": 0,
                "part": part,
            }
        )
        item = message_item(msg_id, text)
        output.append(item)
        await send({"type": "response.output_item.done", "output_index": index, "item": item})


async def _with_stall_timeout(
    events: AsyncIterator[UpstreamEvent], timeout_s: float
) -> AsyncIterator[UpstreamEvent]:
    """The upstream's events, failing with `UpstreamError` when it goes quiet too long."""
    iterator = aiter(events)
    while True:
        try:
            event = await asyncio.wait_for(anext(iterator), timeout_s)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise UpstreamError(f"upstream sent nothing for {timeout_s:g} s") from None
        yield event


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


def _history_item(output_item: dict[str, Any]) -> dict[str, Any]:
    """An output item as the client would resend it in its next request's history."""
    if output_item["type"] == "message":
        return {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": output_item["content"][0]["text"]}],
        }
    return {k: output_item[k] for k in ("type", "call_id", "name", "arguments")}
