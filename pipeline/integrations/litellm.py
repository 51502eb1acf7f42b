"""DeltaGuard as a LiteLLM proxy guardrail: delta-only safety scoring behind LiteLLM.

Attach it in the proxy's `config.yaml` (a full, commented example is
`pipeline/integrations/litellm_config.example.yaml`):

    guardrails:
      - guardrail_name: deltaguard
        litellm_params:
          guardrail: deltaguard.integrations.litellm.DeltaGuardGuardrail
          mode: [pre_call, during_call, post_call]
          default_on: true
          flags_path: /var/log/deltaguard/flags.jsonl
          billing_path: /var/log/deltaguard/billing.jsonl

Hook mapping (LiteLLM's native hooks; this class has no `apply_guardrail`, so the
proxy calls them directly):

- `pre_call` -> `async_pre_call_hook`: the gate lane. Only the history's unseen suffix
  is scored, before the model is called; a block raises HTTP 400 `safety_blocked`.
- `during_call` -> `async_moderation_hook`: the monitor lane (the `monitor:`
  classifiers), beside the model call. LiteLLM sends nothing of the answer, streamed or
  not, before the hook returns, so a block drops the whole answer (its tool calls
  included) with the same error, and blocks the conversation's next turn.
- `post_call` -> `async_post_call_success_hook` (and, for streams,
  `async_post_call_streaming_iterator_hook`): the answer's items and usage are queued for
  output scoring and billing; the client's echo of the answer is then known history.

Chat Completions (`messages`) and Responses (`input`, `instructions`) requests are
converted canonically (`deltaguard.chat_items`), so a client that resends
its whole history has only its new messages scored, with no session id. Other call
types (embeddings, images, Anthropic `/v1/messages`, ...) pass unscored.

Every response carries `x-deltaguard-decision`, `x-deltaguard-tokens-scored` and
`x-deltaguard-latency-ms` headers (`response_headers: false` turns them off).
Configuration keys beside LiteLLM's own are validated by `DeltaGuardSettings`.

Shutdown: LiteLLM has no shutdown hook for guardrails, so on SIGTERM/SIGINT the
guardrail waits for the proxy's requests in flight, then drains its lanes and sinks
while the proxy's teardown waits for it; events still undelivered then are appended to
`spool_path` (`deltaguard.integrations.litellm_lifecycle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import litellm
from fastapi import HTTPException
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.responses.utils import ResponsesAPIRequestUtils
from litellm.types.guardrails import GuardrailEventHooks

from deltaguard.bounds import RequestLimits
from deltaguard.chat_items import (
    ItemCache,
    chat_history_items,
    responses_history_items,
)
from deltaguard.errors import DeltaGuardError, ItemError, PreviousResponseNotFound
from deltaguard.events import DEFAULT_TENANT
from deltaguard.integrations.history_gate import HistoryGate, ProxyTurn
from deltaguard.integrations.litellm_answers import answer_of
from deltaguard.integrations.litellm_lifecycle import GuardrailStage
from deltaguard.integrations.litellm_settings import DeltaGuardSettings
from deltaguard.items import Item
from deltaguard.lanes.provenance import TurnActions
from deltaguard.state.scoring import TurnVerdict
from deltaguard.state.store import LruTtlMap
from deltaguard.telemetry.metrics import PrometheusMetrics
from deltaguard.usage import Usage

log = logging.getLogger("deltaguard.litellm")

SUPPORTED_HOOKS = [
    GuardrailEventHooks.pre_call,
    GuardrailEventHooks.during_call,
    GuardrailEventHooks.post_call,
]
_CHAT_CALLS = frozenset({"completion", "acompletion"})
_RESPONSES_CALLS = frozenset({"responses", "aresponses"})
_LIMITS = RequestLimits()  # the gateway's defaults: what is read of a request is bounded alike


def refusal(status: int, error: str, code: str, **detail: Any) -> HTTPException:
    """A refused call in LiteLLM's guardrail convention: `detail.error` says why, `detail.code`
    what, beside whatever else `detail` names."""
    return HTTPException(status_code=status, detail={"error": error, "code": code, **detail})


def safety_error(
    categories: list[str], lane: str, verdict: TurnVerdict | None, guardrail: str
) -> HTTPException:
    """The HTTP 400 a blocked turn gets."""
    return refusal(
        400,
        f"Request blocked by DeltaGuard: {', '.join(categories)}",
        "safety_blocked",
        categories=categories,
        lane=lane,
        guardrail=guardrail,
        tokens_scored=verdict.tokens_scored if verdict is not None else 0,
    )


def unavailable(exc: Exception) -> HTTPException:
    """HTTP 503: the safety stage cannot score (it is closing, or failed to start)."""
    return refusal(503, str(exc), "safety_unavailable")


def invalid_request(message: str, code: str, param: str | None = None) -> HTTPException:
    """HTTP 400: the request's body cannot be read as a history (`param` names the field)."""
    return refusal(400, message, code, param=param)


def original_response_id(response_id: str) -> str:
    """A Responses API id as the upstream issued it, without the proxy's envelopes.

    The proxy hands clients an id encrypted for the caller (`responses_id_security`)
    around an id that names the deployment (base64), and it does so after the guardrail
    post-call hooks have run; clients send that id back as `previous_response_id`.
    Both sides are keyed by the id inside, so the hooks' order does not matter.
    """
    with contextlib.suppress(Exception):
        from litellm.proxy.hooks.responses_id_security import decrypted_response_id

        response_id = decrypted_response_id(response_id)
    with contextlib.suppress(Exception):
        response_id = ResponsesAPIRequestUtils.decode_previous_response_id_to_original_previous_response_id(
            response_id
        )
    return response_id


def tenant_of(auth: Any, tenant_by: str) -> str:
    """Whose conversation a request is, as `tenant_by` says: the caller's (hashed) API key,
    its team, or nobody's (`DEFAULT_TENANT`, also when the request names none)."""
    if tenant_by == "none" or auth is None:
        return DEFAULT_TENANT
    value = getattr(auth, "team_id" if tenant_by == "team" else "api_key", None)
    return value if isinstance(value, str) and value else DEFAULT_TENANT


def call_key(data: Mapping[str, Any], auth: Any, tenant_by: str) -> tuple[str, str] | None:
    """(tenant, LiteLLM call id): what the hooks of one call find its turn by; None for a
    request without a call id."""
    call_id = data.get("litellm_call_id")
    return (tenant_of(auth, tenant_by), call_id) if isinstance(call_id, str) and call_id else None


def verdict_headers(headers: dict[str, str], lane: str, verdict: TurnVerdict) -> dict[str, str]:
    """`headers` with a lane's verdict added (`x-deltaguard-*` for the gate lane,
    `x-deltaguard-<lane>-*` for the others)."""
    prefix = "x-deltaguard" if lane == "gate" else f"x-deltaguard-{lane}"
    headers[f"{prefix}-decision"] = verdict.decision
    headers[f"{prefix}-tokens-scored"] = str(verdict.tokens_scored)
    headers[f"{prefix}-latency-ms"] = f"{verdict.latency_ms.get('total', 0.0):.3f}"
    if verdict.flagged_categories:
        headers[f"{prefix}-flagged"] = ",".join(verdict.flagged_categories)
    return headers


async def check_request(
    gate: HistoryGate, call: str, data: Mapping[str, Any], cache: ItemCache, tenant: str
) -> ProxyTurn:
    """Gate a chat or Responses request from its body: its history's unseen suffix, or
    what it adds to the response its `previous_response_id` names."""
    if call in _CHAT_CALLS:
        return await gate.check(chat_history_items(data.get("messages"), cache=cache), tenant)
    items = responses_history_items(data.get("input"), data.get("instructions"), cache=cache)
    previous = data.get("previous_response_id")
    if isinstance(previous, str) and previous:
        return await gate.check_continuation(original_response_id(previous), items, tenant)
    return await gate.check(items, tenant)


class DeltaGuardGuardrail(CustomGuardrail):
    """LiteLLM custom guardrail running DeltaGuard's lanes (see the module docstring).

    The constructor only stores settings; the classifiers are loaded once, at proxy
    startup (a task scheduled when the proxy builds the guardrail), and every hook
    waits for that same load (`GuardrailStage`).
    """

    def __init__(self, **kwargs: Any) -> None:
        own = {name: kwargs.pop(name) for name in DeltaGuardSettings.model_fields if name in kwargs}
        self.settings = DeltaGuardSettings.model_validate(own)
        kwargs.setdefault("supported_event_hooks", SUPPORTED_HOOKS)
        super().__init__(**kwargs)
        limits = self.settings.stage_config().store
        # The same per-lane metrics as the gateway's (its own registry: LiteLLM's is not touched).
        self.metrics = PrometheusMetrics()
        self.stage = GuardrailStage(self.settings, self.metrics)
        # (tenant, litellm call id) -> the turn awaiting its answer / its response headers
        self._pending: LruTtlMap[tuple[str, str], ProxyTurn] = LruTtlMap(limits.max_responses, limits.ttl_s)
        self._headers: LruTtlMap[tuple[str, str], dict[str, str]] = LruTtlMap(
            limits.max_responses, limits.ttl_s
        )
        self._items = ItemCache(self.settings.item_cache_size, limits.ttl_s)
        modes = self.event_hook if isinstance(self.event_hook, list) else [self.event_hook]
        if self.event_hook is not None and "pre_call" not in [getattr(m, "value", m) for m in modes]:
            log.warning(
                "DeltaGuard guardrail %s has no pre_call mode: nothing is scored", self.guardrail_name
            )
        with contextlib.suppress(RuntimeError):  # built at proxy startup, inside its loop
            self.stage.spawn(asyncio.get_running_loop().create_task(self.stage.warm_up()))

    async def ready(self) -> HistoryGate:
        """The started gate (classifiers loaded once, under a lock)."""
        return await self.stage.ready()

    async def aclose(self) -> None:
        """Drain the lanes and sinks; undelivered events go to `spool_path` (or the log)."""
        await self.stage.aclose()

    def _key(self, data: Mapping[str, Any], auth: Any) -> tuple[str, str] | None:
        return call_key(data, auth, self.settings.tenant_by)

    def _set_headers(self, key: tuple[str, str], lane: str, verdict: TurnVerdict, turn: ProxyTurn) -> None:
        if self.settings.response_headers:
            headers = self._headers.get(key) or {"x-deltaguard-conversation-id": turn.conversation_id}
            self._headers.put(key, verdict_headers(headers, lane, verdict))

    def _answer(self, turn: ProxyTurn, response: Any) -> tuple[list[Item], Usage, str | None] | None:
        """The answer's items, usage and id, read once; None (logged) when unreadable."""
        try:
            answer = answer_of(response, self._items)
        except ItemError as exc:
            log.warning("DeltaGuard: answer of %s not scored: %s", turn.response_id, exc)
            return None
        if answer is None:
            log.warning("DeltaGuard: answer of %s has an unknown shape; not scored", turn.response_id)
        return answer

    async def _complete(
        self, key: tuple[str, str], turn: ProxyTurn, answer: tuple[list[Item], Usage, str | None] | None
    ) -> None:
        self._pending.discard(key)
        if answer is None:
            return
        output, usage, upstream_id = answer
        try:
            gate = await self.ready()
            await gate.complete(
                turn, output, usage, original_response_id(upstream_id) if upstream_id else None
            )
        except DeltaGuardError:  # closing: the answer is already on its way to the client
            log.error(
                "DeltaGuard: answer of %s not scored or billed: the guardrail is closed", turn.response_id
            )

    # -- pre_call: gate lane -----------------------------------------------------------

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any
    ) -> dict | None:
        call = getattr(call_type, "value", call_type)
        if call not in _CHAT_CALLS and call not in _RESPONSES_CALLS:
            return data
        tenant = tenant_of(user_api_key_dict, self.settings.tenant_by)
        # What is read of the body is bounded first: its walks recurse (as the gateway's do).
        read = {k: data[k] for k in ("messages", "input", "instructions", "tools") if k in data}
        problem = _LIMITS.shape_problem(read)
        if problem is not None:
            code, message = problem
            log.warning("DeltaGuard: request refused: %s: %s", code, message)
            raise refusal(413 if code == "too_many_values" else 400, message, code)
        try:
            turn = await check_request(await self.ready(), call, data, self._items, tenant)
        except ItemError as exc:
            raise invalid_request(str(exc), "invalid_value", exc.field) from exc
        except PreviousResponseNotFound as exc:
            raise invalid_request(str(exc), exc.code, "previous_response_id") from exc
        except DeltaGuardError as exc:  # closing, or a model artifact failed to load
            raise unavailable(exc) from exc
        key = self._key(data, user_api_key_dict)
        if key is not None:
            self._set_headers(key, "gate", turn.gate.verdict, turn)
        if turn.blocked:
            raise safety_error(
                turn.gate.blocked_categories, "gate", turn.gate.verdict, self.guardrail_name or ""
            )
        if key is not None:
            self._pending.put(key, turn)
        return data

    # -- during_call: monitor lane -----------------------------------------------------

    async def async_moderation_hook(self, data: dict, user_api_key_dict: Any, call_type: Any) -> None:
        key = self._key(data, user_api_key_dict)
        turn = self._pending.get(key) if key is not None else None
        if turn is None:
            return
        try:
            gate = await self.ready()
            verdict = await gate.monitor(turn)
        except DeltaGuardError as exc:
            raise unavailable(exc) from exc
        if verdict is None:
            return
        assert key is not None
        self._set_headers(key, "monitor", verdict, turn)
        blocked = gate.blocking(verdict.flagged_categories)
        if blocked:
            self._pending.discard(key)  # the answer is dropped: nothing to score or bill
            raise safety_error(blocked, "monitor", verdict, self.guardrail_name or "")

    # -- post_call: output scoring and billing -----------------------------------------

    async def async_post_call_success_hook(self, data: dict, user_api_key_dict: Any, response: Any) -> Any:
        key = self._key(data, user_api_key_dict)
        turn = self._pending.get(key) if key is not None else None
        if key is None or turn is None:
            return None
        answer = self._answer(turn, response)
        if answer is not None:
            await self._check_actions(key, turn, answer[0])
        await self._complete(key, turn, answer)
        return None  # the response is never changed

    async def _check_actions(self, key: tuple[str, str], turn: ProxyTurn, output: list[Item]) -> None:
        """The action check (`deltaguard.lanes.provenance`) on the answer's tool calls,
        before LiteLLM returns it: a blocked one drops the whole answer with the
        guardrail's error, like a monitor block."""
        try:
            actions = TurnActions.of((await self.ready()).stage, turn)
        except DeltaGuardError:
            return  # closing: the answer goes as it is
        verdicts = await actions.check_answer(output) if actions is not None else []
        if verdicts and actions is not None and actions.blocks:
            self._pending.discard(key)  # the answer is dropped: nothing to score or bill
            error = safety_error([actions.policy.category], "output", None, self.guardrail_name or "")
            error.detail["reason"] = verdicts[0].reason()
            raise error

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict
    ) -> AsyncGenerator[Any, None]:
        key = self._key(request_data, user_api_key_dict)
        watching = key is not None and self._pending.get(key) is not None
        chunks: list[Any] = []
        final: Any = None
        async for chunk in response:
            if watching:
                if getattr(chunk, "type", None) == "response.completed":  # Responses API events
                    final = getattr(chunk, "response", None)
                else:
                    chunks.append(chunk)
            yield chunk
        if not watching:
            return
        assert key is not None
        if final is None and chunks:
            with contextlib.suppress(Exception):
                final = litellm.stream_chunk_builder(chunks=chunks)
        turn = self._pending.get(key)
        if final is not None and turn is not None:
            await self._complete(key, turn, self._answer(turn, final))
        else:
            self._pending.discard(key)

    async def async_post_call_failure_hook(
        self,
        request_data: dict,
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: Any = None,
    ) -> None:
        key = self._key(request_data, user_api_key_dict)
        if key is not None:
            self._pending.discard(key)
        return None

    async def async_post_call_response_headers_hook(
        self,
        data: dict,
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        key = self._key(data, user_api_key_dict)
        if key is None:
            return None
        headers = self._headers.get(key)
        self._headers.discard(key)
        return headers
