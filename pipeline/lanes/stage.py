"""The safety stage of a gateway, in process: it composes the lanes; a `Turn` goes through them.

    stage = SafetyStage(scorer, monitor=("encoder",), flag_sink=..., billing_sink=...)
    await stage.start()
    turn = await stage.begin("acme", new_items=items, previous_response_id="resp_1")
    if turn.blocked: ...                      # before the upstream model is called
    ...stream the model's answer through turn.watch(delta)...
    await turn.finish(output_items, usage)    # queues output scoring and billing
    await stage.aclose()                      # drains every lane and sink

- gate lane (`gate.GateLane`): the cheap classifiers, awaited in `begin`;
- monitor lane (`monitor_lane.MonitorLane`): the expensive ones, beside inference, or,
  in distributed mode, a `publisher.TurnPublisher` that sends each turn to the workers;
- the provenance sketch (`provenance.ProvenanceLane`): folded beside inference too, from
  the gate's record, and awaited only by the action check when the model acts;
- post-inference lane (`post.PostLane`): output scoring and billing, after the response;
- flags go through one `flags.FlagOutlet` (flag sink, then the recorder).

Each lane and sink writer is a `deltaguard.worker.BoundedWorker`; classifier work runs
on two thread pools (`limiter.InferenceLimiter`), each fair between tenants: the request
path's (the gate, what a turn awaits), created at `start()` or injected, and the
background lanes' (monitor, post-inference), at a lower OS priority.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltaguard import defaults
from deltaguard.errors import LaneClosed
from deltaguard.events import DEFAULT_TENANT, BillingEvent, Event, FlagEvent
from deltaguard.items import Item
from deltaguard.journal import BillingJournal, JournalCadence
from deltaguard.lanes.assembly import TrackerTable, assemble, lockout_of, split_lanes
from deltaguard.lanes.awaited_verdicts import AwaitedVerdicts
from deltaguard.lanes.gate import GateAsk
from deltaguard.lanes.limiter import InferenceLimiter
from deltaguard.lanes.pending_verdicts import VerdictWait
from deltaguard.lanes.provenance import ProvenanceLane
from deltaguard.lanes.sanitize import SanitizedItems
from deltaguard.lanes.turn import GateResult, Turn
from deltaguard.sinks import EventSink, FlagRecorder, MemorySink
from deltaguard.state.backends import StateBackend
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import ConversationStore, ResponseRecord, StoreLimits
from deltaguard.telemetry.metrics import NullMetrics, StageMetrics
from deltaguard.usage import Usage
from deltaguard.worker import Lifecycle

__all__ = ["GateResult", "SafetyStage", "StageConfig", "Turn", "Usage"]


@dataclass(frozen=True, slots=True)
class StageConfig:
    inference_threads: int = defaults.INFERENCE_THREADS
    # The most of those threads one tenant may hold at once (`limiter.InferenceLimiter`);
    # None: all of them.
    tenant_threads: int | None = None
    # Each tenant's share of classifier thread time against the others' (default 1).
    tenant_weights: dict[str, float] = field(default_factory=dict)
    # The monitor and post-inference lanes' own threads (shared fairly between tenants,
    # each capped as on the request path's pool) and how much lower their OS priority is.
    background_threads: int = defaults.BACKGROUND_THREADS
    background_nice: int = defaults.BACKGROUND_NICE
    monitor_queue_size: int = defaults.LANE_QUEUE_SIZE
    monitor_batch: int = defaults.MONITOR_BATCH
    post_queue_size: int = defaults.LANE_QUEUE_SIZE
    sink_queue_size: int = defaults.SINK_QUEUE_SIZE
    drain_timeout_s: float = defaults.DRAIN_TIMEOUT_S
    store: StoreLimits = field(default_factory=StoreLimits)
    # How each (lane, tenant) store is made: a benchmark's baseline may keep no snapshots.
    store_factory: Callable[[StoreLimits], ConversationStore] = ConversationStore
    # Where conversation state, the lock-out and the Conversations API's entries live
    # beyond the process (`deltaguard.state.backends.open_backend`); None: in memory only.
    state: StateBackend | None = None
    # A blocked turn never joins the history, so a client can rephrase it again and again
    # from the same point until one version passes. After this many turns of one
    # conversation blocked on their own content in `probe_categories`, every later turn of
    # it is refused too. None: never. Secrets and PII are left out by default: an agent
    # reading files that hold keys is not probing.
    block_limit: int | None = defaults.BLOCK_LIMIT
    probe_categories: frozenset[str] = defaults.PROBE_CATEGORIES
    # How long a lock-out lasts; the window in which one client's blocked first turns
    # count together (`lockout.ConversationLockout`).
    lock_s: float = defaults.LOCK_S
    first_turn_window_s: float = defaults.FIRST_TURN_WINDOW_S
    # An append-only file that keeps each billing event from the start of its generation
    # until the billing sink has it (`deltaguard.journal`): a process killed meanwhile
    # loses none, the next start re-sends them. None: billing lives in memory until sent.
    billing_journal: Path | None = None
    # How often a streaming answer's output count joins its journalled billing event.
    journal_cadence: JournalCadence = field(default_factory=JournalCadence)
    # How long a turn waits for the monitor verdicts pending on its conversation (on any
    # replica of a shared state backend), and what it does past that (`lanes.pending_verdicts`).
    verdict_wait: VerdictWait = field(default_factory=VerdictWait)


class SafetyStage:
    def __init__(
        self,
        scorer: Scorer,
        monitor: Sequence[str] = (),
        flag_sink: EventSink | None = None,
        billing_sink: EventSink | None = None,
        config: StageConfig | None = None,
        turn_sink: EventSink | None = None,
        metrics: StageMetrics | None = None,
        recorder: FlagRecorder | None = None,
        limiter: InferenceLimiter | None = None,
        queue_monitor: bool = True,
        stream_classifiers: Sequence[str] = (),
        verdicts: AwaitedVerdicts | None = None,
    ) -> None:
        """`monitor`: classifiers moved from the gate to the monitor lane, beside those whose
        `lane` is "monitor". `turn_sink`: where turn deltas go for remote monitor workers
        (distributed mode; their flags come back through `mark_flagged`, their verdicts on
        held turns through `verdicts`). `recorder`: records flagged conversations, started
        and drained with the stage. `limiter`: the process's inference pool (made at
        `start()` when not given, closed by `aclose()`). `queue_monitor=False`: the caller
        runs the monitor lane per turn (`Turn.monitor`). `stream_classifiers`: gate
        classifiers `Turn.watch` runs."""
        self.config = config or StageConfig()
        self.gate_scorer, self.monitor_scorer, self.actions_scorer = split_lanes(scorer, monitor)
        self.queue_monitor = queue_monitor
        self.stream_classifiers = frozenset(stream_classifiers)
        self._limiter = limiter
        self._own_limiter = limiter is None
        c = self.config
        scorers = {"gate": self.gate_scorer, "monitor": self.monitor_scorer, "actions": self.actions_scorer}
        self._trackers = TrackerTable(scorers, c.store, c.store_factory, c.state)
        self.policy = scorer.policy
        self.flag_sink = flag_sink or MemorySink()
        self.billing_sink = billing_sink or MemorySink()
        self.turn_sink = turn_sink
        self.verdicts = verdicts
        self.metrics = metrics or NullMetrics()
        self.recorder = recorder
        self.lockout = lockout_of(self.config)
        self.sanitized = SanitizedItems(self.config.store.max_responses, self.config.store.ttl_s)
        self._state = Lifecycle.NEW
        self.undelivered: list[Event] = []  # not delivered by the shutdown deadline: spool them
        self._journal: BillingJournal | None = None

    async def start(self) -> None:
        self._state.to(Lifecycle.RUNNING, "SafetyStage")  # a second start fails here, before any work
        if self.recorder is not None:  # first: an unusable store fails startup cleanly
            await self.recorder.start()
        c = self.config
        self._limiter = self._limiter or InferenceLimiter(
            c.inference_threads, c.tenant_threads, c.tenant_weights
        )
        # Capped per tenant as the request path's pool is: all but one thread when the
        # request path keeps one free for other tenants.
        shared = c.tenant_threads is not None and c.tenant_threads < c.inference_threads
        self._background = InferenceLimiter(
            c.background_threads,
            max(1, c.background_threads - 1) if shared else None,
            c.tenant_weights,
            nice=c.background_nice,
            name="background",
        )
        self._journal = (
            BillingJournal(c.billing_journal, cadence=c.journal_cadence) if c.billing_journal else None
        )
        owed = self._journal.recover() if self._journal is not None else []
        self._lanes = assemble(self, self._trackers, self._limiter.run, self._journal, self._background.run)
        self._lanes.start()
        for event in owed:  # billed before a kill, never confirmed by the sink
            await self._lanes.writers["billing"].put(event)
        self._state = self._state.to(Lifecycle.RUNNING, "SafetyStage")

    async def aclose(self) -> dict[str, int]:
        """Drain the lanes, then the sinks; returns how many events were left undelivered."""
        if self._state in (Lifecycle.CLOSING, Lifecycle.CLOSED):
            return {}
        if self._state is Lifecycle.NEW:
            self._state = self._state.to(Lifecycle.CLOSED, "SafetyStage")
            return {}
        self._state = self._state.to(Lifecycle.CLOSING, "SafetyStage")
        deadline = time.monotonic() + self.config.drain_timeout_s
        left = await self._lanes.aclose(deadline, self.undelivered)
        left["billing"] = sum(isinstance(e, BillingEvent) for e in self.undelivered)
        if self.recorder is not None:
            left["recordings"] = await self.recorder.aclose(max(0.0, deadline - time.monotonic()))
        if self._own_limiter and self._limiter is not None:
            self._limiter.close()
        self._background.close()
        if self._journal is not None:  # what it still owes is re-sent by the next start
            self._journal.close()
        self._state = self._state.to(Lifecycle.CLOSED, "SafetyStage")
        return left

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait until every job queued so far (monitor, post-inference) is done and its
        events are delivered to the sinks; the stage keeps running."""
        self._require_running()
        await asyncio.wait_for(
            self._lanes.flush(), timeout_s if timeout_s is not None else self.config.drain_timeout_s
        )

    async def run(self, fn: Callable[..., Any], *args: Any, tenant: str = DEFAULT_TENANT) -> Any:
        """`fn(*args)` on the request path's pool, as `tenant`'s work (fair between tenants,
        off the event loop): what a request costs besides its classifiers (parsing a
        large body)."""
        self._require_running()
        assert self._limiter is not None
        return await self._limiter.run(fn, *args, tenant=tenant)

    def _require_running(self) -> None:
        if self._state is not Lifecycle.RUNNING:
            raise LaneClosed(f"safety stage is {self._state.value}")

    @property
    def queue_depths(self) -> dict[str, int]:
        return {} if self._state is Lifecycle.NEW else self._lanes.depths()

    @property
    def provenance(self) -> ProvenanceLane | None:
        """The action check's sketch, folded beside inference; None when the stage has no
        provenance classifier, the policy turns the check off, or it was never started."""
        lane = self._lanes.provenance if self._state is not Lifecycle.NEW else None
        return lane if lane is not None and lane.policy.action != "off" else None

    @property
    def stores(self) -> dict[tuple[str, str], ConversationStore]:
        """(lane, tenant) -> store."""
        return {key: tracker.store for key, tracker in self._trackers.trackers.items()}

    async def begin(
        self,
        tenant: str = DEFAULT_TENANT,
        *,
        new_items: Sequence[Item] = (),
        previous_response_id: str | None = None,
        history: Sequence[Item] | None = None,
        conversation_id: str | None = None,
        response_id: str | None = None,
        client: str = "",
        tools: list[dict[str, Any]] | None = None,
        instructions: str | None = None,
    ) -> Turn:
        """Gate a turn: `new_items` continuing `previous_response_id` (stateful clients), or
        a whole `history` resent (stateless clients: only its unseen suffix is scored).
        `client`: the end-user the request names, if any (`safety_identifier`, `user`):
        the lock-out counts blocked first turns per tenant and client. `tools` and
        `instructions`: a request's, judged when they change (`turn.TurnContext`).
        Raises `PreviousResponseNotFound` for an unknown or evicted previous response."""
        self._require_running()
        ask = GateAsk(
            tenant,
            response_id or f"turn_{uuid.uuid4().hex}",
            new_items,
            history,
            previous_response_id,
            conversation_id,
            client,
            tools,
            instructions,
        )
        tracker = self._trackers.gate(tenant)
        gated = await self._lanes.gate.check(ask, tracker)
        verdict = await self._lanes.watcher.submit_turn(gated.gate, gated.record, resent=history is not None)
        provenance = self.provenance
        sketch = provenance.begin(gated.gate, gated.record) if provenance is not None else None
        return Turn(
            self._lanes.turn,
            gated.gate,
            gated.record,
            resent=history is not None,
            monitor_verdict=verdict,
            tools=gated.context.tools,
            tracker=tracker,
            parent_notes=gated.parent_notes,
            history=gated.history,
            sketch=sketch,
        )

    def resume(self, tenant: str, response_id: str) -> Turn:
        """The turn that created `response_id`, to check or finish it later (a guard API's
        output check). Raises `PreviousResponseNotFound` when unknown or evicted."""
        self._require_running()
        return self._turn_of(self._trackers.gate(tenant).record(response_id))

    def resume_at(self, tenant: str, items: Sequence[Item]) -> tuple[Turn | None, int]:
        """The turn whose history, as noted (`Turn.annotate(index=True)`), is the longest
        prefix of `items`, and that prefix's length; (None, 0) when none is known."""
        self._require_running()
        rec, k = self._trackers.gate(tenant).ended_at(items)
        return (self._turn_of(rec), k) if rec is not None else (None, 0)

    def _turn_of(self, rec: ResponseRecord) -> Turn:
        gate = GateResult.from_json(rec.notes["gate"])
        return Turn(self._lanes.turn, gate, rec, resent=rec.parent_id is None, tools=rec.notes.get("tools"))

    async def flag(self, event: FlagEvent, tenant: str = DEFAULT_TENANT) -> None:
        """Queue a flag raised outside the lanes (an action judged before its release)."""
        self._require_running()
        await self._lanes.gate.flags.put(event, tenant)

    def mark_flagged(
        self, conversation_id: str, categories: Sequence[str], tenant: str = DEFAULT_TENANT
    ) -> None:
        """Refuse the conversation's later turns in `categories` (those whose action is block):
        monitor-lane flags, local or from remote workers, and repeated blocks."""
        self.lockout.mark(tenant, conversation_id, categories)

    async def check_turn(
        self,
        response_id: str,
        new_items: Sequence[Item],
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> GateResult:
        """`begin(...).gate`, for callers that need only the gate verdict."""
        turn = await self.begin(
            tenant,
            new_items=new_items,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            response_id=response_id,
        )
        return turn.gate
