"""The guard API: DeltaGuard's lanes for any gateway, called before and after its model.

    POST /v1/guard/input    the conversation (or a continuation id and only its new items)
    POST /v1/guard/output   the model's answer to a checked input, and its usage
    POST /v1/guard/portkey  the same two checks in the Portkey AI gateway's webhook shape
    GET  /openapi.json      the description of all of it, from the wire models (`guard_wire.py`)

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
from deltaguard.errors import ItemError, PreviousResponseNotFound
from deltaguard.events import DEFAULT_TENANT
from deltaguard.gateway.body import BodyParser
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.guard_openapi import OPENAPI
from deltaguard.gateway.guard_wire import (
    InputCheck,
    Latency,
    Locked,
    OutputCheck,
    PortkeySkipped,
    PortkeyVerdict,
    PortkeyWebhook,
    Verdict,
    validated,
)
from deltaguard.gateway.http_errors import RequestError, invalid_item
from deltaguard.gateway.slots import Slots
from deltaguard.gateway.wire import check_sizes, new_id, parse_body
from deltaguard.items import TOOL_DEFINITIONS, Item, canonical_json
from deltaguard.lanes.provenance import TurnActions
from deltaguard.lanes.stage import GateResult, SafetyStage, Turn
from deltaguard.parsing import parse_item
from deltaguard.state.scoring import TurnVerdict
from deltaguard.usage import usage_from


@dataclass(frozen=True, slots=True)
class _Conversation:
    items: list[Item]  # what to score: definitions (when new), instructions, messages
    context: bytes


_CONTEXT = "guard_context"  # the note: digest of the tools and instructions in effect


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 4)


def _answer(gate: GateResult, verdict: TurnVerdict, decision: str, start: float) -> Verdict:
    categories = sorted(set(verdict.flagged_categories) | set(gate.blocked_categories))
    return Verdict(
        decision=decision,
        categories=categories,
        category_scores={k: round(s, 6) for k, s in verdict.category_scores.items()},
        continuation_id=gate.response_id,
        conversation_id=gate.conversation_id,
        tokens_scored=verdict.tokens_scored,
        latency_ms=Latency(
            **{**{k: round(v, 4) for k, v in verdict.latency_ms.items()}, "request": _ms(start)}
        ),
        # A locked conversation says so, why and until when, as the gateway's refusal does.
        locked=Locked(message=gate.refusal().message) if gate.lock is not None else None,
    )


class GuardService:
    def __init__(self, config: GatewayConfig, stage: SafetyStage, slots: Slots) -> None:
        self.config = config
        self.slots = slots
        self.limits = config.request_limits
        self.stage = stage
        self.items = ItemCache(max_bytes=config.item_cache_bytes)
        self.body = BodyParser(stage, config.parse_inline_bytes)
        # An input check keeps the digest of its tools and instructions on its record in the
        # stage (`guard_context`), and a resent history finds it there (`Turn.annotate`).

    # -- parsing -------------------------------------------------------------------------

    def _conversation(self, check: InputCheck | OutputCheck, parent: Turn | None) -> _Conversation:
        """The items a check scores; with a parent, definitions and instructions only when changed."""
        field = check.conversation_field
        raw = check.messages if field == "messages" else check.input
        if isinstance(raw, list):
            check_sizes(raw, str(field), self.limits)
        tools, instructions = check.tools, check.instructions
        context = hashlib.sha256(canonical_json([tools or [], instructions or ""])).digest()
        changed = parent is None or parent.record.notes.get(_CONTEXT) != context
        try:
            if field == "messages":
                items = chat_history_items(raw, cache=self.items)
            else:
                items = responses_history_items(raw, instructions if changed else None, cache=self.items)
        except ItemError as exc:
            raise invalid_item(exc) from None
        if tools and changed:
            items.insert(0, parse_item({"type": TOOL_DEFINITIONS, "tools": tools}))
        return _Conversation(items, context)

    def _parent(self, tenant: str, continuation_id: str) -> Turn:
        with contextlib.suppress(PreviousResponseNotFound):
            turn = self.stage.resume(tenant, continuation_id)
            if _CONTEXT in turn.record.notes:
                return turn
        raise _not_found(continuation_id, "unknown, expired or evicted")

    def _checked_at(self, tenant: str, items: list[Item]) -> Turn | None:
        """The input check of exactly this history, if one is known."""
        turn, k = self.stage.resume_at(tenant, items)
        if turn is None or k != len(items) or _CONTEXT not in turn.record.notes:
            return None
        return turn

    # -- the checks ----------------------------------------------------------------------

    async def _gate(self, check: InputCheck | OutputCheck, tenant: str, continuation: str | None) -> Turn:
        parent = self._parent(tenant, continuation) if continuation else None
        conversation = self._conversation(check, parent)
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
                raise _not_found(continuation or "", "its history was evicted") from None
        turn.annotate(index=parent is None and bool(conversation.items), **{_CONTEXT: conversation.context})
        return turn

    async def check_input(self, check: InputCheck, tenant: str = DEFAULT_TENANT) -> Verdict:
        """The gate lane on the conversation's new items."""
        start = time.perf_counter()
        gate = (await self._gate(check, tenant, check.continuation_id)).gate
        decision = "block" if gate.blocked else gate.verdict.decision
        return _answer(gate, gate.verdict, decision, start)

    def _output_items(self, check: OutputCheck) -> list[Item]:
        """The answer's items, from `output`, `message` or `response`."""
        try:
            if check.answer_field == "output":
                return responses_output_items(check.output, self.items)
            if check.answer_field == "message":
                return chat_output_items(check.message, self.items)
            response = check.response
            if isinstance(response.get("choices"), list):
                first = response["choices"][0] if response["choices"] else {}
                message = first.get("message") if isinstance(first, dict) else None
                return chat_output_items(message, self.items) if isinstance(message, dict) else []
            return responses_output_items(response["output"], self.items)
        except ItemError as exc:
            raise invalid_item(exc, "answer") from None

    async def check_output(self, check: OutputCheck, tenant: str = DEFAULT_TENANT) -> Verdict:
        """Score the model's answer now; billing and the output flag are queued."""
        start = time.perf_counter()
        output = self._output_items(check)
        turn: Turn | None = None
        if check.continuation_id is not None and check.conversation_field is None:
            turn = self._parent(tenant, check.continuation_id)
        else:
            # The conversation as sent to the model: its input check, found by its chain.
            turn = self._checked_at(tenant, self._conversation(check, None).items)
            if turn is None or self._has_output(turn):
                turn = await self._gate(check, tenant, None)
        if self._has_output(turn):
            raise RequestError(
                f"the answer to continuation '{turn.gate.response_id}' was already checked; "
                "check the next input first",
                code="output_already_checked",
                param="continuation_id",
                status=409,
            )
        verdict = await turn.check_output(output)
        decision, actions = await self._check_actions(turn, output, verdict.decision)
        await turn.finish(output, usage_from(check.billed_usage))
        answer = _answer(turn.gate, verdict, decision, start)
        if actions:
            category = self.stage.policy.actions.category
            answer.categories = sorted({*answer.categories, category})
            answer.actions = actions
        return answer

    async def _check_actions(self, turn: Turn, output: list[Item], decision: str) -> tuple[str, list[str]]:
        """The action check on the answer's tool calls (`deltaguard.lanes.provenance`): the
        decision with it, and a reason per call it raises (each gets a flag event)."""
        actions = TurnActions.of(self.stage, turn)
        if actions is None:
            return decision, []
        reasons = [verdict.reason() for verdict in await actions.check_answer(output)]
        if reasons and actions.blocks:
            return "block", reasons
        return ("flag" if reasons and decision == "allow" else decision), reasons

    def _has_output(self, turn: Turn) -> bool:
        try:
            return turn.record.outputs > 0
        except PreviousResponseNotFound:
            raise _not_found(turn.gate.response_id, "its history was evicted") from None

    # -- the Portkey AI gateway's webhook guardrail ------------------------------------

    async def portkey(self, hook: PortkeyWebhook, tenant: str = DEFAULT_TENANT) -> PortkeyVerdict:
        """A Portkey webhook call: `{"verdict": false}` fails the guardrail (Portkey denies
        the request or answer when the guardrail has `deny: true`)."""
        sent = hook.request.body
        conversation = {k: sent[k] for k in ("messages", "input", "instructions", "tools") if k in sent}
        if hook.event_type == "beforeRequestHook":
            result = await self.check_input(self.parse(InputCheck, conversation), tenant)
        else:
            answer = hook.response.body if hook.response is not None else None
            if answer is None or ("choices" not in answer and "output" not in answer):
                return PortkeyVerdict(verdict=True, data=PortkeySkipped(skipped="no model answer to check"))
            check = self.parse(OutputCheck, {**conversation, "response": answer})
            result = await self.check_output(check, tenant)
        return PortkeyVerdict(verdict=result.decision != "block", data=result)

    def parse(self, model: type[Any], body: dict[str, Any]) -> Any:
        """`body` as the wire model `model`, or the refusal that names its fault."""
        return validated(model, body, max_id_length=self.limits.max_id_length)


def _not_found(continuation_id: str, why: str) -> RequestError:
    return RequestError(
        f"Continuation '{continuation_id}' not found ({why}); send the whole conversation instead.",
        code="continuation_not_found",
        param="continuation_id",
        status=404,
    )


class GuardEndpoints:
    """The routes: tenant check, JSON parsing and validation by the wire models, then the
    check; a refusal is raised to the app's handler (`error_exits`), counted under the route."""

    def __init__(self, service: GuardService, tenant: Callable[[Any], str], metrics: Any) -> None:
        """`tenant`: the tenant of a request's headers, or the refusal of a wrong key."""
        self.service = service
        self.tenant = tenant
        self.metrics = metrics

    async def _run(
        self, request: Request, model: type[Any], check: Callable[..., Any], name: str
    ) -> Response:
        request.state.transport = name
        tenant = self.tenant(request.headers)
        limits = self.service.limits
        with self.service.slots.hold(tenant, "guard checks"):
            wire = await self.service.body(
                lambda raw: self.service.parse(model, parse_body(raw, limits)), await request.body(), tenant
            )
            result = await check(wire, tenant)
        self.metrics.requests.labels(name, "ok").inc()
        return JSONResponse(result.model_dump(mode="json", exclude_none=True))

    async def input(self, request: Request) -> Response:
        return await self._run(request, InputCheck, self.service.check_input, "guard_input")

    async def output(self, request: Request) -> Response:
        return await self._run(request, OutputCheck, self.service.check_output, "guard_output")

    async def portkey(self, request: Request) -> Response:
        return await self._run(request, PortkeyWebhook, self.service.portkey, "guard_portkey")

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
