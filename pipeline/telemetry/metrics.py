"""Prometheus metrics for the pipeline (gateway and workers alike).

`StageMetrics` is what lanes report to; `PrometheusMetrics` implements it on its own
registry (so two apps in one process never share counters) and `NullMetrics` is the
default when nothing scrapes. Names follow Prometheus conventions: base units in the
name, `_total` on counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from deltaguard.events import Event, FlagEvent
from deltaguard.items import DEFINITION_TYPES, MODEL_ITEM_TYPES, SCORED_TYPES, SYNTHETIC_TYPES, Item
from deltaguard.state.scoring import TurnVerdict
from deltaguard.state.store import ConversationStore

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
TOKEN_BUCKETS = (0, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)

# Label values come from closed sets: a client's strings (an item's `type`, an upstream's
# status) never become a label of their own, or one request could grow /metrics for good.
OTHER = "other"
ITEM_TYPE_LABELS = frozenset(
    {
        *SCORED_TYPES,
        *MODEL_ITEM_TYPES,
        *DEFINITION_TYPES,
        *SYNTHETIC_TYPES,
        "item_reference",
        "custom_tool_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "computer_call_output",
        "mcp_call",
        "mcp_approval_response",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
    }
)
MAX_OUTCOMES = 64  # distinct request outcomes (error codes, statuses) before `other`
ALL_TENANTS = "all"  # the tenant label when tenant names are not exported


def item_type_label(kind: str) -> str:
    """The `type` label of an item: its type when DeltaGuard knows it, else `other`."""
    return kind if kind in ITEM_TYPE_LABELS else OTHER


class StageMetrics(Protocol):
    def observe_turn(self, lane: str, verdict: TurnVerdict) -> None: ...

    def observe_events(self, sink: str, events: Sequence[Event]) -> None: ...

    def observe_items(self, direction: str, items: Sequence[Item]) -> None: ...


class NullMetrics:
    def observe_turn(self, lane: str, verdict: TurnVerdict) -> None:
        return None

    def observe_events(self, sink: str, events: Sequence[Event]) -> None:
        return None

    def observe_items(self, direction: str, items: Sequence[Item]) -> None:
        return None


class _StateCollector(Collector):
    """Reads store statistics and queue depths at scrape time (no hot-path cost)."""

    def __init__(
        self,
        stores: Callable[[], dict[tuple[str, str], ConversationStore]],
        depths: Callable[[], dict[str, int]],
        tenant_labels: bool = False,
    ):
        self._stores = stores
        self._depths = depths
        self._tenant_labels = tenant_labels

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        cache = CounterMetricFamily(
            "deltaguard_state_cache",
            "Conversation state lookups by lane, tenant and result",
            labels=["lane", "tenant", "result"],
        )
        entries = GaugeMetricFamily(
            "deltaguard_state_entries",
            "Cached entries by lane, tenant and kind",
            labels=["lane", "tenant", "kind"],
        )
        held = GaugeMetricFamily(
            "deltaguard_state_bytes",
            "Bytes the process holds of conversation state (as the store limits count them), "
            "by lane, tenant and kind",
            labels=["lane", "tenant", "kind"],
        )
        # Summed over tenants unless the operator opted in: tenant names are theirs to expose.
        cached: dict[tuple[str, str, str], int] = {}
        sizes: dict[tuple[str, str, str], int] = {}
        nbytes: dict[tuple[str, str, str], int] = {}
        for (lane, tenant), store in list(self._stores().items()):
            who = tenant if self._tenant_labels else ALL_TENANTS
            stats = store.stats
            for result, value in (("hit", stats.hits), ("miss", stats.misses), ("rebuild", stats.rebuilds)):
                cached[lane, who, result] = cached.get((lane, who, result), 0) + value
            for kind, held_map in (
                ("snapshots", store.snapshots),
                ("responses", store.responses),
                ("conversations", store.conversations),
                ("ends", store.ends),
            ):
                sizes[lane, who, kind] = sizes.get((lane, who, kind), 0) + len(held_map)
                nbytes[lane, who, kind] = nbytes.get((lane, who, kind), 0) + held_map.nbytes
        for labels, value in cached.items():
            cache.add_metric(list(labels), value)
        for labels, value in sizes.items():
            entries.add_metric(list(labels), value)
        for labels, value in nbytes.items():
            held.add_metric(list(labels), value)
        depth = GaugeMetricFamily(
            "deltaguard_queue_depth", "Jobs or events waiting, by queue", labels=["queue"]
        )
        for name, value in self._depths().items():
            depth.add_metric([name], value)
        yield cache
        yield entries
        yield held
        yield depth


class _Outcomes:
    """The gateway's request counter, its outcome label capped at `MAX_OUTCOMES` values."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._seen: set[str] = set()

    def labels(self, transport: str, outcome: str) -> Any:
        if outcome not in self._seen:
            if len(self._seen) >= MAX_OUTCOMES or not outcome.isidentifier() or len(outcome) > 64:
                outcome = OTHER
            else:
                self._seen.add(outcome)
        return self._counter.labels(transport, outcome)


class PrometheusMetrics:
    def __init__(self, tenant_labels: bool = False) -> None:
        """`tenant_labels`: export tenant names as label values (off: summed as "all")."""
        self.tenant_labels = tenant_labels
        self.registry = CollectorRegistry()
        r = self.registry
        self.classifier_latency = Histogram(
            "deltaguard_classifier_turn_latency_seconds",
            "Per-classifier latency of one turn",
            ["classifier", "lane"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.turn_latency = Histogram(
            "deltaguard_lane_turn_latency_seconds",
            "All classifiers of a lane for one turn",
            ["lane"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("deltaguard_tokens_scored", "Tokens scored", ["lane"], registry=r)
        self.turn_tokens = Histogram(
            "deltaguard_turn_tokens_scored",
            "Tokens scored per turn",
            ["lane"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "deltaguard_turns", "Turns by lane and decision", ["lane", "decision"], registry=r
        )
        self.flags = Counter("deltaguard_flags", "Flag events delivered", ["lane", "category"], registry=r)
        self.billing = Counter("deltaguard_billing_events", "Billing events delivered", registry=r)
        self.billing_lag = Histogram(
            "deltaguard_billing_lag_seconds",
            "From a response's completion to its billing event's delivery",
            buckets=(*LATENCY_BUCKETS, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.items = Counter(
            "deltaguard_items",
            "Items seen by type (input or output) and whether they carried text that was scored",
            ["direction", "type", "scored"],
            registry=r,
        )
        self.requests = _Outcomes(
            Counter(
                "deltaguard_requests",
                "Gateway requests by transport and outcome",
                ["transport", "outcome"],
                registry=r,
            )
        )

    def watch(
        self, stores: Callable[[], dict[str, ConversationStore]], depths: Callable[[], dict[str, int]]
    ) -> None:
        self.registry.register(_StateCollector(stores, depths, self.tenant_labels))

    def observe_turn(self, lane: str, verdict: TurnVerdict) -> None:
        for name, ms in verdict.latency_ms.items():
            if name == "total":
                self.turn_latency.labels(lane).observe(ms / 1000.0)
            else:
                self.classifier_latency.labels(name, lane).observe(ms / 1000.0)
        self.tokens.labels(lane).inc(verdict.tokens_scored)
        self.turn_tokens.labels(lane).observe(verdict.tokens_scored)
        self.decisions.labels(lane, verdict.decision).inc()

    def observe_items(self, direction: str, items: Sequence[Item]) -> None:
        """Items by type and whether they carried text to score: an item type DeltaGuard
        does not know is counted as `other`, scored all the same."""
        for item in items:
            self.items.labels(direction, item_type_label(item.kind), "true" if item.scored else "false").inc()

    def observe_events(self, sink: str, events: Sequence[Event]) -> None:
        now = time.time()
        for event in events:
            if isinstance(event, FlagEvent):
                for cat in event.categories:
                    self.flags.labels(event.lane, cat).inc()
            elif sink == "billing":
                self.billing.inc()
                self.billing_lag.observe(max(0.0, now - event.created_at))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
