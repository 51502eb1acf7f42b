"""Gateway settings, with documented defaults (docs/gateway.md, "Limits and faults"; docs/hardening.md)."""

from __future__ import annotations

import dataclasses
import os
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deltaguard import defaults
from deltaguard.access import default_hosts
from deltaguard.bounds import RequestLimits
from deltaguard.classifiers.registry import DEFAULT_NAMES
from deltaguard.classifiers.vouched import glob_pattern
from deltaguard.errors import StateBackendError
from deltaguard.journal import JournalCadence
from deltaguard.lanes.pending_verdicts import VerdictWait
from deltaguard.state.backends import parse_state_url


def api_keys_from_env() -> dict[str, str]:
    """`DELTAGUARD_API_KEYS="tenant-a:key1,tenant-b:key2"` -> {key: tenant}."""
    out: dict[str, str] = {}
    for pair in os.environ.get("DELTAGUARD_API_KEYS", "").split(","):
        tenant, sep, key = pair.strip().partition(":")
        if sep and tenant and key:
            out[key] = tenant
    return out


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("state")
    @classmethod
    def _state_url(cls, value: str) -> str:
        try:
            parse_state_url(value)
        except StateBackendError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @field_validator("vouch")
    @classmethod
    def _vouch_globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for glob in value:
            glob_pattern(glob)  # a ValueError names the glob
        return value

    host: str = defaults.HOST
    port: int = Field(defaults.PORT, ge=0, le=65535)
    # "sim" is the embedded simulated model; anything else is the base URL of a
    # Responses-API-compatible endpoint (e.g. https://api.openai.com/v1).
    upstream: str = "sim"
    upstream_api_key: str | None = Field(
        default_factory=lambda: os.environ.get("DELTAGUARD_UPSTREAM_API_KEY")
    )
    upstream_timeout_s: float = 120.0
    # How the upstream is reached: "auto" uses its Responses WebSocket mode (one persistent
    # connection per conversation, only new items per turn) and falls back to HTTP with
    # the whole history when it has none; "http" always resends the whole history.
    upstream_mode: Literal["auto", "http"] = "auto"
    upstream_max_connections: int = Field(256, ge=1)  # pooled upstream sockets (LRU)
    upstream_stall_timeout_s: float = Field(30.0, gt=0)  # longest silence mid-stream
    sim_tokens_per_s: float = Field(1000.0, gt=0)
    sim_reply_tokens: int = Field(40, ge=1)
    sim_tool_calls: int = Field(3, ge=0)  # tool calls per user request before the final answer
    sim_prefill_s_per_token: float = Field(0.0, ge=0)  # the simulated model's cost per uncached input token

    # Where conversation state lives (deltaguard.state.backends): memory:// (this process
    # only), sqlite:///PATH (one file, survives restarts), redis://HOST:PORT/DB (shared by
    # replicas).
    state: str = defaults.STATE_URL

    # Distributed mode: kafka://HOST:PORT, and optionally a JSON file of KafkaSettings.
    broker: str | None = None
    kafka_config: str | None = None

    # API key -> tenant. Empty: no authentication, every client is tenant "default".
    api_keys: dict[str, str] = Field(default_factory=api_keys_from_env)
    # GET /metrics: with this key set, only `Authorization: Bearer <it>` may scrape; without
    # it, any tenant key when keys are configured (open only when nothing is).
    metrics_api_key: str | None = Field(default_factory=lambda: os.environ.get("DELTAGUARD_METRICS_API_KEY"))
    # Tenant names as label values of the state metrics (off: summed over tenants as "all").
    metrics_tenant_labels: bool = False

    # The classifier set (classifiers/registry.py), plus any the monitor lane names.
    classifiers: tuple[str, ...] = DEFAULT_NAMES
    # Classifiers run in the monitor lane (beside inference) instead of the gate lane.
    monitor_classifiers: tuple[str, ...] = ()
    # Paths whose tool outputs the operator vouches for (classifiers/vouched.py): judged as
    # the operator's own instructions. None by default.
    vouch: tuple[str, ...] = ()
    # Classifiers that score the model's output while it streams (flags before the end).
    output_stream_classifiers: tuple[str, ...] = ("secrets", "pii", "harm")
    flags_path: str | None = None  # JSONL file for flag events (in memory when unset)
    # Events that could not be delivered by the shutdown deadline are appended here.
    spool_path: str = "deltaguard-undelivered.jsonl"
    billing_path: str | None = None  # JSONL file for billing events (in memory when unset)
    # Billing kept on disk from the start of each generation until the billing sink has it
    # (deltaguard.journal): a gateway killed meanwhile re-sends it at its next start.
    billing_journal_path: str | None = None
    # With a journal, a streaming answer's output count joins its billing event there once
    # this many tokens have streamed since the last write, or at the first token this long
    # after it: a kill leaves the output streamed until then billed (docs/deployment.md).
    billing_journal_every_tokens: int = Field(defaults.JOURNAL_EVERY_TOKENS, ge=1)
    billing_journal_every_s: float = Field(defaults.JOURNAL_EVERY_S, gt=0)
    # Flagged conversations recorded to this SQLite file (deltaguard.recording), replayable
    # with `deltaguard replay --from-store`; not recorded when unset.
    record_path: str | None = None
    record_redact: bool = True  # secrets and PII values replaced by [REDACTED:<kind>]
    record_max_conversations: int = Field(10_000, ge=1)  # recordings kept (least recent go)
    record_max_age_s: float | None = Field(30 * 24 * 3600.0, gt=0)  # None: no age limit

    # A turn whose untrusted input (tool outputs, files) the monitor lane judges: what of
    # the model's output waits for that verdict (gateway/release.py). "actions": tool calls
    # of every kind (text streams meanwhile); "all": everything; "off": nothing (a flag
    # then blocks the next turn). Past the timeout the output is released, and logged.
    release_hold: Literal["actions", "all", "off"] = "actions"
    release_hold_timeout_s: float = Field(30.0, gt=0)
    # A turn waits this long for the monitor verdicts still pending on its conversation,
    # whichever replica judges them (a shared state backend), before it reads the flags
    # they raise (0: never waits). Past it, "proceed": the turn goes on without them
    # (logged, counted); "refuse": 503 monitor_verdict_pending, which clients retry
    # (docs/state.md, "Monitor verdicts across replicas").
    monitor_verdict_wait_s: float = Field(defaults.MONITOR_VERDICT_WAIT_S, ge=0)
    monitor_verdict_late: Literal["proceed", "refuse"] = defaults.MONITOR_VERDICT_LATE

    # A policy file (pipeline/state/policy.py): thresholds and actions per category over the defaults.
    policy_path: str | None = None
    # Turns of one conversation blocked for injection, jailbreak or toxicity after which all
    # of its later turns are refused (a client rephrasing a refused request); None: never.
    block_limit: int | None = Field(defaults.BLOCK_LIMIT, ge=1)
    # How long a lock-out lasts (its refusal says until when), and the window in which one
    # client's (tenant and end-user's) blocked first turns count together.
    lock_s: float = Field(defaults.LOCK_S, gt=0)
    first_turn_window_s: float = Field(defaults.FIRST_TURN_WINDOW_S, gt=0)

    # Browser access (deltaguard.access): the names a request's Host may carry (None: the
    # loopback names and the bind address when it names one host; "*": any), and origins
    # allowed besides the server's own ("*": any). DNS rebinding and cross-site requests
    # from a page the operator opens are refused with 403.
    allowed_hosts: tuple[str, ...] | None = None
    allowed_origins: tuple[str, ...] = ()

    # Slow clients (deltaguard.serving): a connection's request headers must be complete
    # this long after its first byte (or after it opened), and its body read this long after
    # the headers; a keep-alive connection idle this long after a response is closed.
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(60.0, gt=0)
    idle_timeout_s: float = Field(5.0, gt=0)
    # SIGTERM: how long WebSocket turns in flight may take to finish (then each socket
    # closes with 1012); HTTP responses get 2 s more. What is cut off is billed to the cut.
    shutdown_drain_s: float = Field(8.0, gt=0)
    # WebSocket per-message compression (permessage-deflate), off unless asked for: under a
    # streaming load it was a ninth of the event loop's CPU (the loop every tenant shares),
    # for token deltas too small to gain from it; and a secret compressed beside text that
    # an attacker chooses leaks through the frames' sizes (as BREACH does over HTTP).
    ws_compression: bool = False
    # The event loop `deltaguard serve` runs on: "auto" is uvloop (libuv's, in C) where it
    # is installed (a dependency off Windows), else asyncio's. Every tenant's requests wait
    # on this one loop, and asyncio's own Python (its selector, transports and timers) was
    # a share of its CPU under load.
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"

    # Classifier work (deltaguard.lanes.limiter): threads it runs on, and the most of them one
    # tenant may hold at once (None: all but one when keys name several tenants, else all).
    # Free threads go to the waiting tenant that has used the least thread time for its
    # weight (`tenant_weights`: tenant -> share against the others; default 1).
    inference_threads: int = Field(defaults.INFERENCE_THREADS, ge=1)
    tenant_inference_threads: int | None = Field(None, ge=1)
    tenant_weights: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    # The monitor and post-inference lanes run on threads of their own, fair between
    # tenants alike, this much lower in OS priority (Linux; 0: the same as the request path).
    background_threads: int = Field(defaults.BACKGROUND_THREADS, ge=1)
    background_nice: int = Field(defaults.BACKGROUND_NICE, ge=0, le=19)
    # Seconds a thread may hold the GIL while another waits for it (`sys.setswitchinterval`),
    # set by `deltaguard serve` for the whole process.
    gil_switch_s: float = Field(defaults.GIL_SWITCH_S, gt=0, le=1.0)
    # Seconds between two trims of glibc's heaps (0: never): what large requests freed in C
    # goes back to the OS instead of staying in the process's RSS.
    heap_trim_s: float = Field(defaults.HEAP_TRIM_S, ge=0)
    # Request bodies (and WebSocket frames) larger than this are parsed off the event loop,
    # on the request path's pool as their tenant's work (deltaguard.gateway.body).
    parse_inline_bytes: int = Field(defaults.PARSE_INLINE_BYTES, ge=0)
    # Requests in flight per tenant, responses, chat completions and guard checks together
    # (beyond it: 429 tenant_overloaded; deltaguard.gateway.slots), and the bytes each
    # (lane, tenant) conversation store holds in this process, for records and snapshots each.
    max_inflight_per_tenant: int = Field(256, ge=1)
    state_max_bytes: int = Field(defaults.STATE_MAX_BYTES, ge=1 << 20)
    # Bytes the chat and guard APIs each keep of parsed items, so a resent history is not
    # parsed again (deltaguard.chat_items.ItemCache).
    item_cache_bytes: int = Field(defaults.ITEM_CACHE_BYTES, ge=0)

    # Limits (per process and per WebSocket connection).
    max_connections: int = Field(1000, ge=1)
    max_inflight_responses: int = Field(2000, ge=1)  # all APIs together; beyond it: 503 server_overloaded
    max_connection_age_s: float = Field(3600.0, gt=0)  # like the hosted API's 60-minute cap
    # What one request may hold (`request_limits`).
    max_request_bytes: int = Field(defaults.MAX_REQUEST_BYTES, ge=1024)
    max_json_depth: int = Field(defaults.MAX_JSON_DEPTH, ge=8)  # containers nested in a request
    max_json_values: int = Field(defaults.MAX_JSON_VALUES, ge=1000)  # values in a request, in all
    max_item_bytes: int = Field(defaults.MAX_ITEM_BYTES, ge=256)
    max_items_per_request: int = Field(defaults.MAX_ITEMS_PER_REQUEST, ge=1)
    max_id_length: int = Field(defaults.MAX_ID_LENGTH, ge=8)

    def journal_cadence(self) -> JournalCadence:
        return JournalCadence(self.billing_journal_every_tokens, self.billing_journal_every_s)

    def verdict_wait(self) -> VerdictWait:
        return VerdictWait(self.monitor_verdict_wait_s, self.monitor_verdict_late)

    def hosts(self) -> tuple[str, ...]:
        """The Host names allowed (`allowed_hosts`, or its default for the bind address)."""
        return self.allowed_hosts if self.allowed_hosts is not None else default_hosts(self.host)

    def tenant_threads(self) -> int:
        """`tenant_inference_threads`, or its default for the configured tenants."""
        if self.tenant_inference_threads is not None:
            return min(self.tenant_inference_threads, self.inference_threads)
        several = len(set(self.api_keys.values())) > 1
        return max(1, self.inference_threads - 1) if several else self.inference_threads

    @property
    def request_limits(self) -> RequestLimits:
        """What a request is checked against: the request fields above, by name."""
        return RequestLimits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RequestLimits)})
