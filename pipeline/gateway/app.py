"""The ASGI app: `POST /v1/responses` (JSON or SSE), WebSocket `/v1/responses`,
`POST /v1/chat/completions` (`chat.py`), the guard API and `GET /openapi.json`
(`guard.py`), `GET /metrics`, `GET /healthz`.

Routes raise what they refuse; the app's exception handlers (`error_exits.ErrorExits`)
answer it, as a JSON error or, on a socket, an `error` event that leaves the socket open.

    app = create_app(GatewayConfig(), scorer)   # classifiers already loaded
    uvicorn.run(app, host="127.0.0.1", port=8400)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from deltaguard.access import HostOriginGuard
from deltaguard.errors import ItemError, KafkaPathError
from deltaguard.gateway.body import BodyParser
from deltaguard.gateway.chat import ChatEndpoint, ChatService, build_chat_upstream
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.error_exits import CLIENT_ERRORS, ErrorExits, client_error
from deltaguard.gateway.guard import GuardEndpoints, GuardService, routes_of
from deltaguard.gateway.http_errors import RequestError, error_event, invalid_item, unauthorized
from deltaguard.gateway.service import ResponsesService
from deltaguard.gateway.slots import Slots
from deltaguard.gateway.upstreams import (
    ChatUpstream,
    HttpUpstream,
    SimulatedModel,
    Upstream,
    WebSocketUpstream,
)
from deltaguard.gateway.wire import CreateRequest, parse_body, read_create
from deltaguard.lanes.stage import SafetyStage, StageConfig
from deltaguard.parsing import parse_items
from deltaguard.recording import TranscriptRecorder
from deltaguard.sinks import EventSink, JsonlSink, MemorySink
from deltaguard.state.backends import open_backend
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import StoreLimits
from deltaguard.telemetry.metrics import PrometheusMetrics
from deltaguard.tenants import tenant_for

log = logging.getLogger("deltaguard.gateway")


def build_upstream(config: GatewayConfig) -> Upstream:
    if config.upstream == "sim":
        return SimulatedModel(
            config.sim_tokens_per_s,
            config.sim_reply_tokens,
            config.sim_tool_calls,
            config.sim_prefill_s_per_token,
        )
    http = HttpUpstream(config.upstream, config.upstream_api_key, config.upstream_timeout_s)
    if config.upstream_mode == "http":
        return http
    return WebSocketUpstream(
        config.upstream, config.upstream_api_key, http, max_connections=config.upstream_max_connections
    )


def _sink(path: str | None) -> EventSink:
    return JsonlSink(Path(path)) if path else MemorySink()


def _recorder(config: GatewayConfig, scorer: Scorer) -> TranscriptRecorder | None:
    if config.record_path is None:
        return None
    return TranscriptRecorder(
        config.record_path,
        scorer,
        redact=config.record_redact,
        max_conversations=config.record_max_conversations,
        max_age_s=config.record_max_age_s,
    )


class _Unowned:
    """A sink shared by several writers: closing one writer must not close it."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink

    async def send(self, events: Any) -> None:
        await self._sink.send(events)

    async def aclose(self) -> None:
        return None


class Gateway:
    """Holds the running parts; built once per app, started by the app's lifespan."""

    def __init__(
        self,
        config: GatewayConfig,
        scorer: Scorer,
        *,
        flag_sink: EventSink | None = None,
        billing_sink: EventSink | None = None,
        stage_config: StageConfig | None = None,
        upstream: Upstream | None = None,
        chat_upstream: ChatUpstream | None = None,
    ) -> None:
        self.config = config
        self.limits = config.request_limits  # what every request is checked against, read once
        self.metrics = PrometheusMetrics(tenant_labels=config.metrics_tenant_labels)
        self.exits = ErrorExits(self.metrics)  # the app's exception handlers
        self.kafka: Any = None
        self.flag_subscriber: Any = None
        turn_sink = None
        verdicts = None
        if config.broker:
            # Distributed mode: turns, flags and billing go to Kafka; workers run the
            # monitor lane and their flags come back through the subscriber.
            try:
                from deltaguard.kafka.settings import KafkaSettings
                from deltaguard.kafka.sink import KafkaEventSink
                from deltaguard.kafka.subscriber import FlagSubscriber, awaited_verdicts
            except ModuleNotFoundError as exc:
                raise KafkaPathError(f"--broker needs {exc.name}: pip install 'deltaguard[kafka]'") from exc

            settings = (
                KafkaSettings.from_file(Path(config.kafka_config), broker=config.broker)
                if config.kafka_config
                else KafkaSettings(broker=config.broker)
            )
            self.kafka = KafkaEventSink(settings)
            turn_sink = flag_sink = billing_sink = _Unowned(self.kafka)
            verdicts = awaited_verdicts(settings, config.release_hold, config.release_hold_timeout_s)
        # Conversation state beyond the process (sqlite://, redis://); None: memory://.
        self.state = open_backend(config.state)
        stage_config = stage_config or StageConfig(
            block_limit=config.block_limit,
            lock_s=config.lock_s,
            first_turn_window_s=config.first_turn_window_s,
            inference_threads=config.inference_threads,
            tenant_threads=config.tenant_threads(),
            tenant_weights=dict(config.tenant_weights),
            background_threads=config.background_threads,
            background_nice=config.background_nice,
            store=StoreLimits(max_bytes=config.state_max_bytes),
            billing_journal=Path(config.billing_journal_path) if config.billing_journal_path else None,
            journal_cadence=config.journal_cadence(),
            verdict_wait=config.verdict_wait(),
        )
        if stage_config.state is None and self.state is not None:
            stage_config = dataclasses.replace(stage_config, state=self.state)
        self.stage = SafetyStage(
            scorer,
            monitor=config.monitor_classifiers,
            flag_sink=flag_sink or _sink(config.flags_path),
            billing_sink=billing_sink or _sink(config.billing_path),
            turn_sink=turn_sink,
            config=stage_config,
            metrics=self.metrics,
            recorder=_recorder(config, scorer),
            stream_classifiers=config.output_stream_classifiers,
            verdicts=verdicts,
        )
        self.metrics.watch(lambda: self.stage.stores, lambda: self.stage.queue_depths)
        self.upstream = upstream or build_upstream(config)
        # Requests in flight, per tenant and in all, whichever API they came through.
        self.slots = Slots(config.max_inflight_per_tenant, config.max_inflight_responses)
        self.service = ResponsesService(config, self.stage, self.upstream, self.slots)
        self.body = BodyParser(self.stage, config.parse_inline_bytes)
        self.chat_upstream = chat_upstream or build_chat_upstream(config)
        self.chat = ChatEndpoint(
            ChatService(config, self.stage, self.chat_upstream, self.slots), self.tenant, self.metrics
        )
        self.guard = GuardEndpoints(GuardService(config, self.stage, self.slots), self.tenant, self.metrics)
        self.connections = 0
        # Set when the server begins to shut down (deltaguard.serving): each WebSocket
        # finishes its turn in flight, then closes.
        self.draining = asyncio.Event()
        if self.kafka is not None:
            self.flag_subscriber = FlagSubscriber(settings, self.stage.mark_flagged, verdicts=verdicts)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        if self.kafka is not None:
            await self.kafka.start()  # never waits for the broker: it spools meanwhile
            await self.flag_subscriber.start()
        ping = getattr(self.state, "ping", None)
        if ping is not None:  # a shared backend that cannot be reached fails startup cleanly
            ping()
        await self.stage.start()
        try:
            yield
        finally:
            await self.service.settle()  # responses cut off at shutdown are billed first
            left = await self.stage.aclose()
            if self.kafka is not None:
                await self.flag_subscriber.aclose()
                await self.kafka.aclose()  # flushes, or spools what the broker did not take
            if self.stage.undelivered:
                # Spooled, never dropped: one JSON event per line, re-sendable as is.
                path = Path(self.config.spool_path)
                with path.open("a", encoding="utf-8") as f:
                    for event in self.stage.undelivered:
                        f.write(json.dumps(event.model_dump(mode="json")) + "\n")
                log.error("events not delivered by the shutdown deadline (%s) spooled to %s", left, path)
            await self.upstream.aclose()
            await self.chat_upstream.aclose()
            if self.state is not None:
                self.state.close()

    def tenant_of(self, headers: Any) -> str | None:
        """The tenant whose API key the request carries; None when the key is wrong.

        Every configured key is compared, in constant time, so timing does not tell
        which key (or how much of one) matched.
        """
        return tenant_for(self.config.api_keys, headers)

    def tenant(self, headers: Any) -> str:
        """The tenant whose API key the request carries; a wrong key is refused (401)."""
        tenant = self.tenant_of(headers)
        if tenant is None:
            raise unauthorized()
        return tenant

    # -- HTTP --------------------------------------------------------------------------

    async def create_response(self, request: Request) -> Response:
        request.state.transport = "http"  # a refusal's count (`ErrorExits`), streamed or not
        tenant = self.tenant(request.headers)
        req = await self.body(self._read_create, await request.body(), tenant)
        if not req.stream:
            final = await self.service.create(req, tenant)
            self.metrics.requests.labels("http", "ok").inc()
            return JSONResponse(final)
        # Run until the first event so that a refusal is a plain HTTP error.
        events = self.service.events(req, tenant)
        try:
            first = await anext(events)
        except BaseException:
            await events.aclose()
            raise
        self.metrics.requests.labels("sse", "ok").inc()
        return StreamingResponse(_sse(first, events), media_type="text/event-stream")

    def _read_create(self, raw: bytes | str) -> CreateRequest:
        return read_create(raw, self.limits)

    def _read_frame(self, raw: bytes | str) -> CreateRequest:
        return read_create(raw, self.limits, frame=True)

    # -- the Conversations API -------------------------------------------------------------

    async def conversations(self, request: Request) -> Response:
        """POST /v1/conversations, GET/DELETE /v1/conversations/{id}, GET .../items."""
        tenant = self.tenant(request.headers)
        conversation_id = request.path_params.get("conversation_id")
        if conversation_id is None:
            body = parse_body(await request.body() or b"{}", self.limits)
            try:
                items = parse_items(body.get("items") or [], "items")
            except ItemError as exc:
                raise invalid_item(exc) from None
            metadata = body.get("metadata")
            if metadata is not None and not isinstance(metadata, dict):
                raise RequestError("metadata must be an object", code="invalid_type", param="metadata")
            entry = await self.service.create_conversation(items, metadata, tenant)
        elif request.url.path.endswith("/items"):
            data = self.service.conversation_items(conversation_id, tenant)
            return JSONResponse(
                {
                    "object": "list",
                    "data": data,
                    "first_id": data[0].get("id") if data else None,
                    "last_id": data[-1].get("id") if data else None,
                    "has_more": False,
                }
            )
        elif request.method == "DELETE":
            self.service.delete_conversation(conversation_id, tenant)
            return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})
        else:
            entry = self.service.conversation(conversation_id, tenant)
        return JSONResponse(
            {
                "id": entry.id,
                "object": "conversation",
                "created_at": entry.created_at,
                "metadata": entry.metadata,
            }
        )

    async def metrics_endpoint(self, request: Request) -> Response:
        # The scrape names lanes, queues and (opted in) tenants: behind the metrics key, else
        # behind any tenant key once keys are configured.
        key = self.config.metrics_api_key
        allowed = tenant_for({key: "metrics"}, request.headers) if key else self.tenant_of(request.headers)
        if allowed is None:
            raise unauthorized()
        return Response(self.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "queues": self.stage.queue_depths})

    # -- WebSocket ---------------------------------------------------------------------

    async def websocket(self, ws: WebSocket) -> None:
        tenant = self.tenant_of(ws.headers)
        if tenant is None:
            await ws.close(code=1008, reason="invalid API key")  # before accept: HTTP 403
            return
        if self.connections >= self.config.max_connections:
            await ws.close(code=1013, reason="too many connections")
            return
        await ws.accept()
        self.connections += 1
        deadline = time.monotonic() + self.config.max_connection_age_s
        draining = asyncio.ensure_future(self.draining.wait())
        try:
            while True:
                if self.draining.is_set():  # shutdown: the turn in flight has finished
                    await ws.close(code=1012)  # "service restart": the client reconnects
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    age = self.config.max_connection_age_s
                    err = RequestError(
                        f"connection reached its {age:.0f} s lifetime; reconnect",
                        code="websocket_connection_limit_reached",
                    )
                    await ws.send_text(json.dumps(error_event(err)))
                    await ws.close(code=1000)
                    return
                receive = asyncio.ensure_future(ws.receive())
                await asyncio.wait(
                    {receive, draining}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                if not receive.done():
                    receive.cancel()
                    continue
                message = receive.result()
                if message["type"] == "websocket.disconnect":
                    return
                try:
                    await self._ws_turn(ws, message, tenant)
                except CLIENT_ERRORS as exc:  # the frame is refused; the socket serves the next
                    await self.exits.websocket(ws, exc)
        except WebSocketDisconnect:
            return
        finally:
            draining.cancel()
            self.connections -= 1

    async def _ws_turn(self, ws: WebSocket, message: dict[str, Any], tenant: str) -> None:
        """One `response.create` on a socket. Any response of the tenant can be continued,
        whichever transport or socket created it: state lives in the safety stage."""
        raw = message.get("text")
        if raw is None:
            raise RequestError("binary frames are not accepted; send JSON text", code="invalid_frame")
        req = await self.body(self._read_frame, raw, tenant)
        status = "ok"
        async with contextlib.aclosing(self.service.events(req, tenant)) as events:
            async for event in events:
                await ws.send_text(json.dumps(event))
                status = event.get("response", {}).get("status", status)
        self.metrics.requests.labels("websocket", status).inc()


async def _sse(first: dict[str, Any], events: AsyncGenerator[dict[str, Any], None]) -> AsyncIterator[bytes]:
    try:
        yield f"event: {first['type']}\ndata: {json.dumps(first)}\n\n".encode()
        async for event in events:
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
    except CLIENT_ERRORS as exc:  # after the first event: an `error` event ends the stream
        yield f"event: error\ndata: {json.dumps(error_event(client_error(exc)))}\n\n".encode()
    finally:
        await events.aclose()


async def _gone(request: Request, exc: Exception) -> Response:
    """A client that left before its request was read (or was dropped for reading too
    slowly): nothing to answer, and nothing to log as the app's failure."""
    return Response(status_code=499)


def create_app(
    config: GatewayConfig, scorer: Scorer, *, routes: Sequence[BaseRoute] = (), **kwargs: Any
) -> Starlette:
    """The gateway's app; `routes` are mounted beside its own (the review page, `serve --record`)."""
    gateway = Gateway(config, scorer, **kwargs)
    app = Starlette(
        routes=[
            Route("/v1/responses", gateway.create_response, methods=["POST"]),
            Route("/v1/chat/completions", gateway.chat.handle, methods=["POST"]),
            *(Route(path, endpoint, methods=methods) for path, endpoint, methods in routes_of(gateway.guard)),
            Route("/v1/conversations", gateway.conversations, methods=["POST"]),
            Route("/v1/conversations/{conversation_id}", gateway.conversations, methods=["GET", "DELETE"]),
            Route("/v1/conversations/{conversation_id}/items", gateway.conversations, methods=["GET"]),
            WebSocketRoute("/v1/responses", gateway.websocket),
            Route("/metrics", gateway.metrics_endpoint, methods=["GET"]),
            Route("/healthz", gateway.healthz, methods=["GET"]),
            *routes,
        ],
        lifespan=gateway.lifespan,
        exception_handlers={ClientDisconnect: _gone, **gateway.exits.handlers()},
        middleware=[
            Middleware(HostOriginGuard, allowed_hosts=config.hosts(), allowed_origins=config.allowed_origins)
        ],
    )
    app.state.gateway = gateway
    return app
