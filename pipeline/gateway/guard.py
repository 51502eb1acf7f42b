"""The guard API: DeltaGuard's lanes for any gateway, called before and after its model.

    POST /v1/guard/input    the conversation (or a continuation id and only its new items)
    POST /v1/guard/output   the model's answer to a checked input, and its usage
    POST /v1/guard/portkey  the same two checks in the Portkey AI gateway's webhook shape
    GET  /openapi.json      the description of all of it (`guard_openapi.py`)

Both checks take the conversation in Responses shape (`input`, `instructions`) or Chat
Completions shape (`messages`), with optional `tools` (scored as untrusted content).
Without an id the whole conversation is sent every time and the hash chain finds the
prefix already scored, so only the new items are folded and the conversation keeps one
identity; with the `continuation_id` of the previous check only the new items are sent,
which also saves hashing the history. The answer is `allow`, `flag` or `block` with the
flagged categories and the conversation-level scores. The output check scores the answer
at once (the caller is about to return it) and queues billing and the output flag.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from deltaguard.chat_items import (
    ItemCache,
    chat_history_items,
    chat_output_items,
    responses_history_items,
    responses_output_items,
)
from deltaguard.errors import ItemError, PreviousResponseNotFound, RequestError
from deltaguard.events import DEFAULT_TENANT
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.guard_openapi import OPENAPI
from deltaguard.gateway.http_errors import error_response, unauthorized
from deltaguard.gateway.wire import check_sizes, new_id, optional_instructions, optional_tools, parse_body
from deltaguard.items import TOOL_DEFINITIONS, Item, canonical_json
from deltaguard.lanes.stage import GateResult, SafetyStage, Turn
from deltaguard.parsing import parse_item
from deltaguard.state.scoring import TurnVerdict
from deltaguard.usage import usage_from, usage_problem


@dataclass(frozen=True, slots=True)
class _Conversation:
    items: list[Item]  # what to score: definitions (when new), instructions, messages
    context: bytes


_CONTEXT = "guard_context"  # the note: digest of the tools and instructions in effect


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 4)


def _answer(gate: GateResult, verdict: TurnVerdict, decision: str, start: float) -> dict[str, Any]:
    categories = sorted(set(verdict.flagged_categories) | set(gate.blocked_categories))
    # A locked conversation says so, why and until when, as the gateway's refusal does.
    locked = {"locked": {"message": gate.refusal().message}} if gate.lock is not None else {}
    return {
        **locked,
        "decision": decision,
        "categories": categories,
        "category_scores": {k: round(s, 6) for k, s in verdict.category_scores.items()},
        "continuation_id": gate.response_id,
        "conversation_id": gate.conversation_id,
        "tokens_scored": verdict.tokens_scored,
        "latency_ms": {**{k: round(v, 4) for k, v in verdict.latency_ms.items()}, "request": _ms(start)},
    }


class GuardService:
    def __init__(self, config: GatewayConfig, stage: SafetyStage) -> None:
        self.config = config
        self.stage = stage
        self.items = ItemCache()
        # An input check keeps the digest of its tools and instructions on its record in the
        # stage (`guard_context`), and a resent history finds it there (`Turn.annotate`).

    # -- parsing -------------------------------------------------------------------------

    def _id(self, body: dict[str, Any]) -> str | None:
        value = body.get("continuation_id")
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise RequestError(
                "continuation_id must be a non-empty string", code="invalid_type", param="continuation_id"
            )
        if len(value) > self.config.max_id_length:
            raise RequestError(
                f"continuation_id is longer than {self.config.max_id_length} characters",
                code="invalid_value",
                param="continuation_id",
            )
        return value

    def _conversation(self, body: dict[str, Any], parent: Turn | None) -> _Conversation:
        """The items a check scores; with a parent, definitions and instructions only when changed."""
        has_messages, has_input = "messages" in body, "input" in body
        if has_messages == has_input:
            raise RequestError(
                "send the conversation as exactly one of messages (Chat Completions) or input (Responses)",
                code="missing_required_parameter" if not has_messages else "invalid_request",
                param="messages",
            )
        field = "messages" if has_messages else "input"
        raw = body[field]
        if isinstance(raw, list):
            c = self.config
            check_sizes(raw, field, max_items=c.max_items_per_request, max_item_bytes=c.max_item_bytes)
        tools = optional_tools(body)
        instructions = optional_instructions(body)
        context = hashlib.sha256(canonical_json([tools or [], instructions or ""])).digest()
        changed = parent is None or parent.record.notes.get(_CONTEXT) != context
        try:
            if has_messages:
                items = chat_history_items(raw, cache=self.items)
            else:
                items = responses_history_items(raw, instructions if changed else None, cache=self.items)
        except ItemError as exc:
            raise RequestError(f"invalid item: {exc}", code="invalid_item", param=exc.field) from None
        if tools and changed:
            items.insert(0, parse_item({"type": TOOL_DEFINITIONS, "tools": tools}))
        return _Conversation(items, context)

    def _parent(self, tenant: str, continuation_id: str) -> Turn:
        with contextlib.suppress(PreviousResponseNotFound):
            turn = self.stage.resume(tenant, continuation_id)
            if _CONTEXT in turn.record.notes:
                return turn
        raise RequestError(
            f"Continuation '{continuation_id}' not found (unknown, expired or evicted); "
            "send the whole conversation instead.",
            code="continuation_not_found",
            param="continuation_id",
            status=404,
        )

    def _checked_at(self, tenant: str, items: list[Item]) -> Turn | None:
        """The input check of exactly this history, if one is known."""
        turn, k = self.stage.resume_at(tenant, items)
        if turn is None or k != len(items) or _CONTEXT not in turn.record.notes:
            return None
        return turn

    # -- the checks ----------------------------------------------------------------------

    async def _gate(self, body: dict[str, Any], tenant: str) -> Turn:
        continuation = self._id(body)
        parent = self._parent(tenant, continuation) if continuation else None
        conversation = self._conversation(body, parent)
        response_id = new_id("guard")
        if parent is None:
            turn = await self.stage.begin(tenant, history=conversation.items, response_id=response_id)
        else:
            try:
                turn = await self.stage.begin(
                    tenant,
                    new_items=conversation.items,
                    previous_response_id=parent.gate.response_id,
                    response_id=response_id,
                )
            except PreviousResponseNotFound:
                raise self._not_found(continuation or "") from None
        turn.annotate(index=parent is None and bool(conversation.items), **{_CONTEXT: conversation.context})
        return turn

    @staticmethod
    def _not_found(continuation_id: str) -> RequestError:
        return RequestError(
            f"Continuation '{continuation_id}' not found (its history was evicted); "
            "send the whole conversation instead.",
            code="continuation_not_found",
            param="continuation_id",
            status=404,
        )

    async def check_input(self, body: dict[str, Any], tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
        """The gate lane on the conversation's new items."""
        start = time.perf_counter()
        gate = (await self._gate(body, tenant)).gate
        decision = "block" if gate.blocked else gate.verdict.decision
        return _answer(gate, gate.verdict, decision, start)

    def _output_items(self, body: dict[str, Any]) -> tuple[list[Item], Any]:
        """(the answer's items, its usage) from `output`, `message` or `response`."""
        given = [k for k in ("output", "message", "response") if k in body]
        if len(given) != 1:
            raise RequestError(
                "send the model's answer as exactly one of output (Responses items), "
                "message (a chat message) or response (the model's whole response object)",
                code="missing_required_parameter" if not given else "invalid_request",
                param="output",
            )
        field = given[0]
        value = body[field]
        usage = body.get("usage")
        try:
            if field == "output":
                if not isinstance(value, list):
                    raise ItemError("output", "expected a list of items")
                return responses_output_items(value, self.items), usage
            if field == "message":
                if not isinstance(value, dict):
                    raise ItemError("message", "expected a message object")
                return chat_output_items(value, self.items), usage
            if not isinstance(value, dict):
                raise ItemError("response", "expected a response object")
            usage = usage if usage is not None else value.get("usage")
            if isinstance(value.get("choices"), list):
                first = value["choices"][0] if value["choices"] else {}
                message = first.get("message") if isinstance(first, dict) else None
                return (chat_output_items(message, self.items) if isinstance(message, dict) else []), usage
            if isinstance(value.get("output"), list):
                return responses_output_items(value["output"], self.items), usage
            raise ItemError("response", "expected a chat completion (choices) or a Responses object (output)")
        except ItemError as exc:
            raise RequestError(f"invalid answer: {exc}", code="invalid_item", param=exc.field) from None

    async def check_output(self, body: dict[str, Any], tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
        """Score the model's answer now; billing and the output flag are queued."""
        start = time.perf_counter()
        output, usage = self._output_items(body)
        if usage is not None and not isinstance(usage, dict):
            raise RequestError("usage must be an object", code="invalid_type", param="usage")
        problem = usage_problem(usage) if usage is not None else None
        if problem is not None:  # billed as given: refused rather than clamped or dropped
            raise RequestError(problem, code="invalid_usage", param="usage")
        continuation = self._id(body)
        turn: Turn | None = None
        if continuation is not None and not ("messages" in body or "input" in body):
            turn = self._parent(tenant, continuation)
        else:
            # The conversation as sent to the model: its input check, found by its chain.
            turn = self._checked_at(tenant, self._conversation(body, None).items)
            if turn is None or self._has_output(turn):
                turn = await self._gate({k: v for k, v in body.items() if k != "continuation_id"}, tenant)
        if self._has_output(turn):
            raise RequestError(
                f"the answer to continuation '{turn.gate.response_id}' was already checked; "
                "check the next input first",
                code="output_already_checked",
                param="continuation_id",
                status=409,
            )
        verdict = await turn.check_output(output)
        await turn.finish(output, usage_from(usage))
        return _answer(turn.gate, verdict, verdict.decision, start)

    def _has_output(self, turn: Turn) -> bool:
        try:
            return turn.record.outputs > 0
        except PreviousResponseNotFound:
            raise self._not_found(turn.gate.response_id) from None

    # -- the Portkey AI gateway's webhook guardrail ------------------------------------

    async def portkey(self, body: dict[str, Any], tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
        """A Portkey webhook call: `{"verdict": false}` fails the guardrail (Portkey denies
        the request or answer when the guardrail has `deny: true`)."""
        event = body.get("eventType")
        request = body.get("request") if isinstance(body.get("request"), dict) else {}
        sent = request.get("json") if isinstance(request.get("json"), dict) else None
        if sent is None:
            raise RequestError(
                "request.json must be the request object", code="invalid_type", param="request"
            )
        conversation = {k: sent[k] for k in ("messages", "input", "instructions", "tools") if k in sent}
        if event == "beforeRequestHook":
            result = await self.check_input(conversation, tenant)
        elif event == "afterRequestHook":
            response = body.get("response") if isinstance(body.get("response"), dict) else {}
            answer = response.get("json")
            if not isinstance(answer, dict) or ("choices" not in answer and "output" not in answer):
                return {"verdict": True, "data": {"decision": "allow", "skipped": "no model answer to check"}}
            result = await self.check_output({**conversation, "response": answer}, tenant)
        else:
            raise RequestError(
                f"unknown eventType {event!r}; expected beforeRequestHook or afterRequestHook",
                code="invalid_value",
                param="eventType",
            )
        return {"verdict": result["decision"] != "block", "data": result}


class GuardEndpoints:
    """The routes: tenant check, JSON parsing, one error shape for every refusal."""

    def __init__(self, service: GuardService, tenant_of: Callable[[Any], str | None], metrics: Any) -> None:
        self.service = service
        self.tenant_of = tenant_of
        self.metrics = metrics

    async def _run(self, request: Request, check: Callable[..., Any], name: str) -> Response:
        tenant = self.tenant_of(request.headers)
        try:
            if tenant is None:
                raise unauthorized()
            body = parse_body(await request.body(), **self.service.config.json_limits())
            result = await check(body, tenant)
        except RequestError as err:
            self.metrics.requests.labels(name, err.code).inc()
            return error_response(err)
        self.metrics.requests.labels(name, "ok").inc()
        return JSONResponse(result)

    async def input(self, request: Request) -> Response:
        return await self._run(request, self.service.check_input, "guard_input")

    async def output(self, request: Request) -> Response:
        return await self._run(request, self.service.check_output, "guard_output")

    async def portkey(self, request: Request) -> Response:
        return await self._run(request, self.service.portkey, "guard_portkey")

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(OPENAPI)


def routes_of(endpoints: GuardEndpoints) -> Sequence[tuple[str, Callable[..., Any], list[str]]]:
    """(path, endpoint, methods) for the app."""
    return (
        ("/v1/guard/input", endpoints.input, ["POST"]),
        ("/v1/guard/output", endpoints.output, ["POST"]),
        ("/v1/guard/portkey", endpoints.portkey, ["POST"]),
        ("/openapi.json", endpoints.openapi, ["GET"]),
    )
