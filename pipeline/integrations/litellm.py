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
  classifiers), beside the model call. A block drops the answer with the same error and
  blocks the conversation's next turn.
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
`spool_path` (see `DeltaGuardGuardrail._close_at_exit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import litellm
from fastapi import HTTPException
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.responses.utils import ResponsesAPIRequestUtils
from litellm.types.guardrails import GuardrailEventHooks

from deltaguard.chat_items import (
    ItemCache,
    chat_history_items,
    responses_history_items,
)
from deltaguard.errors import DeltaGuardError, ItemError, LaneClosed, PreviousResponseNotFound
from deltaguard.events import DEFAULT_TENANT
from deltaguard.integrations.history_gate import HistoryGate, ProxyTurn
from deltaguard.integrations.litellm_answers import answer_of
from deltaguard.integrations.litellm_settings import DeltaGuardSettings
from deltaguard.recording import TranscriptRecorder
from deltaguard.sinks import EventSink, JsonlSink, MemorySink
from deltaguard.state.loading import build_scorer
from deltaguard.state.scoring import TurnVerdict
from deltaguard.state.store import LruTtlMap
from deltaguard.telemetry.metrics import PrometheusMetrics

log = logging.getLogger("deltaguard.litellm")

SUPPORTED_HOOKS = [
    GuardrailEventHooks.pre_call,
    GuardrailEventHooks.during_call,
    GuardrailEventHooks.post_call,
]
_CHAT_CALLS = frozenset({"completion", "acompletion"})
_RESPONSES_CALLS = frozenset({"responses", "aresponses"})


def safety_error(
    categories: list[str], lane: str, verdict: TurnVerdict | None, guardrail: str
) -> HTTPException:
    """The HTTP 400 a blocked turn gets, in LiteLLM's guardrail convention (`detail.error`)."""
    return HTTPException(
        status_code=400,
        detail={
            "error": f"Request blocked by DeltaGuard: {', '.join(categories)}",
            "code": "safety_blocked",
            "categories": categories,
            "lane": lane,
            "guardrail": guardrail,
            "tokens_scored": verdict.tokens_scored if verdict is not None else 0,
        },
    )


def unavailable(exc: Exception) -> HTTPException:
    """HTTP 503: the safety stage cannot score (it is closing, or failed to start)."""
    return HTTPException(status_code=503, detail={"error": str(exc), "code": "safety_unavailable"})


def invalid_request(message: str, code: str, param: str | None = None) -> HTTPException:
    return HTTPException(status_code=400, detail={"error": message, "code": code, "param": param})


async def _requests_drained() -> None:
    """Wait until the proxy has no HTTP request in flight.

    LiteLLM counts them (`InFlightRequestsMiddleware`); the wait is bounded by its
    graceful-shutdown timeout (`GRACEFUL_SHUTDOWN_TIMEOUT`, 30 s by default), as the
    server's own wait is. Without that middleware, returns at once.
    """
    try:
        from litellm.proxy.middleware.in_flight_requests_middleware import get_in_flight_requests
        from litellm.proxy.shutdown.graceful_shutdown_manager import GracefulShutdownManager
    except ImportError:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GracefulShutdownManager.get_timeout()
    while get_in_flight_requests() > 0 and loop.time() < deadline:
        await asyncio.sleep(0.005)


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


class DeltaGuardGuardrail(CustomGuardrail):
    """LiteLLM custom guardrail running DeltaGuard's lanes (see the module docstring).

    The constructor only stores settings; the classifiers are loaded once, at proxy
    startup (a task scheduled when the proxy builds the guardrail), and every hook
    waits for that same load.
    """

    def __init__(self, **kwargs: Any) -> None:
        own = {name: kwargs.pop(name) for name in DeltaGuardSettings.model_fields if name in kwargs}
        self.settings = DeltaGuardSettings.model_validate(own)
        kwargs.setdefault("supported_event_hooks", SUPPORTED_HOOKS)
        super().__init__(**kwargs)
        limits = self.settings.stage_config().store
        self._gate: HistoryGate | None = None
        # The same per-lane metrics as the gateway's (its own registry: LiteLLM's is not touched).
        self.metrics = PrometheusMetrics()
        self._closed = False
        self._terminating = asyncio.Event()
        self._closer: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        # (tenant, litellm call id) -> the turn awaiting its answer / its response headers
        self._pending: LruTtlMap[tuple[str, str], ProxyTurn] = LruTtlMap(limits.max_responses, limits.ttl_s)
        self._headers: LruTtlMap[tuple[str, str], dict[str, str]] = LruTtlMap(
            limits.max_responses, limits.ttl_s
        )
        self._items = ItemCache(self.settings.item_cache_size, limits.ttl_s)
        self._tasks: set[asyncio.Task[Any]] = set()
        modes = self.event_hook if isinstance(self.event_hook, list) else [self.event_hook]
        if self.event_hook is not None and "pre_call" not in [getattr(m, "value", m) for m in modes]:
            log.warning(
                "DeltaGuard guardrail %s has no pre_call mode: nothing is scored", self.guardrail_name
            )
        with contextlib.suppress(RuntimeError):  # built at proxy startup, inside its loop
            self._spawn(asyncio.get_running_loop().create_task(self._warm_up()))

    def _spawn(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- lifecycle ---------------------------------------------------------------------

    def _sink(self, path: Path | None) -> EventSink:
        if path is None:
            return MemorySink()
        path.parent.mkdir(parents=True, exist_ok=True)
        return JsonlSink(path, fsync=self.settings.fsync)

    async def _warm_up(self) -> None:
        try:
            await self.ready()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("DeltaGuard failed to start; requests will retry and fail until it does")

    async def ready(self) -> HistoryGate:
        """The started gate (classifiers loaded once, under a lock)."""
        if self._gate is not None:
            return self._gate
        async with self._start_lock:
            if self._closed:
                raise LaneClosed("the DeltaGuard guardrail is closed (the proxy is shutting down)")
            if self._gate is None:
                if self._closer is None:
                    # Watched before the classifiers load: a SIGTERM that arrives while they
                    # do must still drain the requests waiting on them.
                    self._closer = asyncio.create_task(self._close_at_exit(), name="deltaguard:closer")
                    self._spawn(self._closer)
                    self._watch_shutdown_signals()
                s = self.settings
                scorer = await asyncio.to_thread(build_scorer, tuple(s.classifiers), thresholds=s.thresholds)
                gate = HistoryGate(
                    scorer,
                    monitor=s.monitor,
                    flag_sink=self._sink(s.flags_path),
                    billing_sink=self._sink(s.billing_path),
                    config=s.stage_config(),
                    metrics=self.metrics,
                    recorder=TranscriptRecorder(str(s.record_path), scorer) if s.record_path else None,
                )
                await gate.start()
                self._gate = gate
                log.info(
                    "DeltaGuard ready: gate %s, monitor %s",
                    gate.gate_classifiers,
                    s.monitor,
                )
        return self._gate

    async def _close_at_exit(self) -> None:
        # LiteLLM has no shutdown hook for guardrails, and uvicorn re-raises SIGTERM once
        # its lifespan teardown is done, which ends the process without unwinding the
        # event loop. So on SIGTERM or SIGINT (`_watch_shutdown_signals`) this task waits
        # for the requests in flight (their answers queue output scoring and billing),
        # then drains; the teardown awaits it (`_shutting_down`). A loop cancelled
        # otherwise (an embedding server) lands in `finally`.
        try:
            await self._terminating.wait()
            await _requests_drained()
        finally:
            await self.aclose()

    def _watch_shutdown_signals(self) -> None:
        """Chain SIGTERM/SIGINT handlers in front of the server's own (uvicorn's)."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            # Only a server's handler is chained; without one the signal ends the process.
            if not callable(previous) or previous is signal.default_int_handler:
                continue

            def on_signal(sig: int, frame: Any, previous: Any = previous) -> None:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(self._shutting_down)
                previous(sig, frame)

            signal.signal(signum, on_signal)

    def _shutting_down(self) -> None:
        if self._terminating.is_set() or self._closer is None:
            return
        self._terminating.set()
        # The proxy's teardown awaits its audit-log tasks (up to 5 s) before the process
        # ends: the one registry of background work it waits for. Registering the drain
        # there makes the teardown wait for it too.
        with contextlib.suppress(ImportError):
            from litellm.proxy.management_helpers.audit_logs import track_audit_task

            track_audit_task(self._closer)

    async def aclose(self) -> None:
        """Drain the lanes and sinks; undelivered events go to `spool_path` (or the log)."""
        self._closed = True
        self._terminating.set()  # the closer task, if waiting, ends too
        gate, self._gate = self._gate, None
        if gate is None:
            return
        left = await gate.aclose()
        log.info("DeltaGuard closed (undelivered events: %s)", left)
        if not gate.undelivered:
            return
        path = self.settings.spool_path
        if path is None:
            log.error("DeltaGuard: %d events undelivered at shutdown (no spool_path)", len(gate.undelivered))
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            for event in gate.undelivered:
                f.write(json.dumps(event.model_dump(mode="json"), ensure_ascii=False) + "\n")
        log.warning("DeltaGuard: %d undelivered events spooled to %s", len(gate.undelivered), path)

    # -- helpers -----------------------------------------------------------------------

    def _tenant(self, auth: Any) -> str:
        by = self.settings.tenant_by
        if by == "none" or auth is None:
            return DEFAULT_TENANT
        value = getattr(auth, "team_id" if by == "team" else "api_key", None)
        return value if isinstance(value, str) and value else DEFAULT_TENANT

    @staticmethod
    def _call_id(data: Mapping[str, Any]) -> str | None:
        value = data.get("litellm_call_id")
        return value if isinstance(value, str) and value else None

    def _key(self, data: Mapping[str, Any], auth: Any) -> tuple[str, str] | None:
        call_id = self._call_id(data)
        return (self._tenant(auth), call_id) if call_id else None

    def _set_headers(self, key: tuple[str, str], lane: str, verdict: TurnVerdict, turn: ProxyTurn) -> None:
        if not self.settings.response_headers:
            return
        headers = self._headers.get(key) or {"x-deltaguard-conversation-id": turn.conversation_id}
        prefix = "x-deltaguard" if lane == "gate" else f"x-deltaguard-{lane}"
        headers[f"{prefix}-decision"] = verdict.decision
        headers[f"{prefix}-tokens-scored"] = str(verdict.tokens_scored)
        headers[f"{prefix}-latency-ms"] = f"{verdict.latency_ms.get('total', 0.0):.3f}"
        if verdict.flagged_categories:
            headers[f"{prefix}-flagged"] = ",".join(verdict.flagged_categories)
        self._headers.put(key, headers)

    async def _complete(self, key: tuple[str, str], response: Any) -> None:
        turn = self._pending.get(key)
        if turn is None:
            return
        self._pending.discard(key)
        try:
            answer = answer_of(response, self._items)
        except ItemError as exc:
            log.warning("DeltaGuard: answer of %s not scored: %s", turn.response_id, exc)
            return
        if answer is None:
            log.warning("DeltaGuard: answer of %s has an unknown shape; not scored", turn.response_id)
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
        tenant = self._tenant(user_api_key_dict)
        try:
            gate = await self.ready()
            if call in _CHAT_CALLS:
                messages = data.get("messages")
                turn = await gate.check(chat_history_items(messages, cache=self._items), tenant)
            else:
                items = responses_history_items(
                    data.get("input"), data.get("instructions"), cache=self._items
                )
                previous = data.get("previous_response_id")
                if isinstance(previous, str) and previous:
                    turn = await gate.check_continuation(original_response_id(previous), items, tenant)
                else:
                    turn = await gate.check(items, tenant)
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
        if key is not None:
            await self._complete(key, response)
        return None  # the response is never changed

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
        if final is not None:
            await self._complete(key, final)
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
