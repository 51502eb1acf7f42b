"""One turn through the safety stage: what every adapter holds between the gate and the end.

    turn = await stage.begin(tenant, new_items=items, previous_response_id="resp_1")
    if turn.blocked: ...                        # refused before the upstream model is called
    sent = turn.forward(generate=True)          # what the upstream needs to continue
    async for delta in model: await turn.watch(delta)
    await turn.finish(output_items, usage, upstream_id="up_9")

A `Turn` carries its gate verdict (`gate`), the tools it runs with (`tools`: the
request's, else those of the response it continues), the history the model is sent
(`history`) and its record in the stage's conversation store (`record`, whose `notes`
hold what its continuations inherit: its tools and the digests of its tools and
instructions, the upstream's id).
`watch` scores the model's text while it streams; `finish` does everything that follows
the response, once and in order: the output joins the history, the notes are kept, and
output scoring and billing are queued for the post-inference lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from deltaguard.classifiers.provenance import Sketch
from deltaguard.errors import LifecycleError, TurnBlocked
from deltaguard.events import FlagEvent
from deltaguard.items import TOOL_DEFINITIONS, Item, canonical_json, sent_items, wire_items
from deltaguard.lanes.lockout import Lock
from deltaguard.lanes.output_stream import OutputStreamScorer
from deltaguard.lanes.sanitize import SanitizedItems
from deltaguard.parsing import instructions_item, parse_item, parse_items
from deltaguard.state.scoring import Scorer, TurnVerdict
from deltaguard.state.store import ResponseRecord
from deltaguard.state.tracker import ConversationTracker
from deltaguard.telemetry.metrics import StageMetrics
from deltaguard.usage import Usage

log = logging.getLogger("deltaguard.stage")


@dataclass(frozen=True, slots=True)
class GateResult:
    tenant: str
    response_id: str
    conversation_id: str
    verdict: TurnVerdict
    blocked: bool
    blocked_categories: list[str]  # why it was blocked: this turn's or earlier flags
    # The turn's new items carry untrusted content (tool outputs, attached files): what
    # the model does with it is judged by the monitor lane before it is acted on.
    untrusted_input: bool = False
    # Categories whose spans were cut out of untrusted content (action `sanitize`): the
    # turn goes on, and the upstream is sent the sanitised items (`Turn.forward`).
    sanitized: list[str] = field(default_factory=list)
    lock: Lock | None = None  # the lock-out that refused the turn, if one did

    def to_json(self) -> dict[str, Any]:
        """The gate verdict as the turn's record notes it (`from_json` reads it back)."""
        return {
            "tenant": self.tenant,
            "response_id": self.response_id,
            "conversation_id": self.conversation_id,
            "verdict": self.verdict.to_json(),
            "blocked": self.blocked,
            "blocked_categories": list(self.blocked_categories),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> GateResult:
        return cls(
            tenant=obj["tenant"],
            response_id=obj["response_id"],
            conversation_id=obj["conversation_id"],
            verdict=TurnVerdict.from_json(obj["verdict"]),
            blocked=bool(obj["blocked"]),
            blocked_categories=list(obj["blocked_categories"]),
        )

    def refusal(self) -> TurnBlocked:
        """The error a client gets for this blocked turn: a locked conversation says so."""
        if self.lock is not None:
            return TurnBlocked(self.blocked_categories, why=self.lock.why, until=self.lock.until)
        return TurnBlocked(self.blocked_categories)


class OutputWatcher(Protocol):
    """What watches a turn beside the gate (the monitor lane, or a turn publisher)."""

    async def submit_output(self, gate: GateResult, output: Sequence[Item]) -> None: ...


@dataclass(frozen=True, slots=True)
class TurnLanes:
    """The stage's parts a turn uses after its gate verdict (built once, at `start()`)."""

    scorer: Scorer  # the gate lane's classifiers
    tracker: Callable[[str], ConversationTracker]  # the gate lane's tracker of a tenant
    run: Callable[..., Awaitable[Any]]  # the inference pool
    flag_output: Callable[[GateResult, list[str], dict[str, float]], Awaitable[FlagEvent]]
    watcher: OutputWatcher
    judge: Callable[[GateResult, Sequence[Item]], Awaitable[TurnVerdict | None]]
    post: Callable[[GateResult, Sequence[Item], Usage], Awaitable[None]]
    # `Turn.generating` (None: the stage keeps no billing journal)
    owe: Callable[[GateResult, Callable[[], Usage]], Callable[[str], None] | None] | None
    metrics: StageMetrics
    stream_classifiers: frozenset[str]  # gate classifiers that also score streamed output
    sanitized: SanitizedItems = field(default_factory=SanitizedItems)  # items sent cut
    # What follows the responses whose `finish` was cancelled mid-way, still to be queued.
    settling: set[asyncio.Task[None]] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class TurnContext:
    """What a request brings beside its items: its tools (those it continues when it names
    none) and, as items to judge, its tool definitions and instructions when they differ
    from what it continues (schemas and descriptions are a tool-poisoning channel; the
    instructions are a system message by another name). `notes`: kept on the record."""

    items: tuple[Item, ...] = ()
    tools: list[dict[str, Any]] | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        parent_notes: dict[str, Any],
        tools: list[dict[str, Any]] | None,
        instructions: str | None,
        continues: bool,
    ) -> TurnContext:
        """`continues`: the turn continues a response (whose notes are `parent_notes`)."""
        if tools is None and instructions is None and "tools_digest" not in parent_notes:
            return cls()  # nothing to judge, nothing for continuations to inherit
        if tools is None and continues:  # inherited whole: its digest too, not hashed again
            tools, tools_digest = parent_notes.get("tools"), parent_notes.get("tools_digest")
        else:
            tools_digest = hashlib.sha256(canonical_json(tools or [])).hexdigest()
        instructions_digest = hashlib.sha256(canonical_json(instructions or "")).hexdigest()
        items = []
        if tools and tools_digest != parent_notes.get("tools_digest"):
            items.append(parse_item({"type": TOOL_DEFINITIONS, "tools": tools}))
        if instructions and instructions_digest != parent_notes.get("instructions_digest"):
            items.append(instructions_item(instructions))
        notes = {"tools": tools, "tools_digest": tools_digest, "instructions_digest": instructions_digest}
        return cls(tuple(items), tools, notes)


@dataclass(frozen=True, slots=True)
class Forward:
    """What the upstream model is sent for a turn (`Turn.forward`), as wire items."""

    parent: str | None  # the upstream's id of the response it continues; None: send `history`
    new_items: list[dict[str, Any]]  # what that response has not seen
    history: list[dict[str, Any]]  # every item, oldest first
    history_items: list[Item]  # `history` as parsed, item for item


class Turn:
    """One turn: its gate verdict, history and record (see the module docstring)."""

    def __init__(
        self,
        lanes: TurnLanes,
        gate: GateResult,
        record: ResponseRecord,
        *,
        resent: bool = False,
        monitor_verdict: asyncio.Future[TurnVerdict | None] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tracker: ConversationTracker | None = None,
        parent_notes: dict[str, Any] | None = None,
        history: list[Item] | None = None,
        sketch: asyncio.Future[Sketch] | None = None,
    ) -> None:
        """`record`: the turn's record as the gate left it; `resent`: it holds a whole
        history a stateless client resent (else the items after its parent's).
        `monitor_verdict`: the queued monitor lane's verdict on the turn, when it carries
        untrusted input (None: nothing to wait for). `tools`: see `TurnContext`.
        `tracker`: the tenant's gate tracker, when the caller holds it; `parent_notes`: the
        notes of the response it continues, and `history`: the turn's, when the caller has
        read them (the gate has). `sketch`: the fold of the conversation's provenance
        sketch as of the turn's input, begun beside inference when the turn was gated
        (`provenance.ProvenanceLane`; None: none begun, the action check starts it)."""
        self._lanes = lanes
        self._monitor_verdict = monitor_verdict
        self.sketch = sketch
        self._tracker = tracker if tracker is not None else lanes.tracker(gate.tenant)
        self.gate = gate
        self.tools = tools
        # The monitor lane is judging this turn's untrusted input (`monitor_verdict`).
        self.awaits_monitor = monitor_verdict is not None
        # `finish` ran: the output joined the history; billing, if any, is queued.
        self.finished = False
        self._begun = record
        self._resent = resent
        self._history = history
        self._stream: OutputStreamScorer | None = None
        self._appended = False  # the output joined the history (`check_output`)
        self._parent_notes = parent_notes
        self._metered: Callable[[str], None] | None = None  # streamed text's output count, journalled

    # The gate's, read through: a turn never changes what the gate decided.
    @property
    def response_id(self) -> str:
        return self.gate.response_id

    @property
    def conversation_id(self) -> str:
        return self.gate.conversation_id

    @property
    def blocked(self) -> bool:
        return self.gate.blocked

    @property
    def verdict(self) -> TurnVerdict:
        return self.gate.verdict

    @property
    def history(self) -> list[Item]:
        """Every item the model is sent, oldest first."""
        if self._history is None:
            self._history = list(self._begun.items) if self._resent else self._begun.history()
        return self._history

    @property
    def record(self) -> ResponseRecord:
        """The turn's record in the store, as of now (its output once appended)."""
        return self._tracker.record(self.gate.response_id)

    async def monitor_verdict(self) -> list[str]:
        """Wait for the monitor lane's verdict on the turn's untrusted input; the block
        categories it raised ([]: nothing blocks, or nothing to wait for, or the lane
        failed on the turn, which it logs). Cancelling the wait leaves the lane's work be."""
        if self._monitor_verdict is None:
            return []
        verdict = await asyncio.shield(self._monitor_verdict)
        if verdict is None or verdict.decision != "block":  # an alert (Policy.monitor_blocking) holds nothing
            return []
        policy = self._lanes.scorer.policy.categories
        return [c for c in verdict.flagged_categories if c in policy and policy[c].action == "block"]

    @property
    def upstream_history(self) -> list[Item]:
        """`history` as the upstream model is sent it: items an injection was cut out of
        (policy action `sanitize`), in this turn or an earlier one, in their sanitised form."""
        return self._lanes.sanitized.apply(self.gate.tenant, self.history)

    def forward(self, *, generate: bool = False) -> Forward:
        """What the upstream needs to continue this turn: the upstream's id of the response
        it continues (None: send the whole history), the items that response has not seen
        and the whole history, sanitised (`upstream_history`). Counts the unseen items in
        the input-items metric. `generate`: the upstream is asked for a response now
        (`generating`)."""
        if generate:
            self.generating()
        history = self.history
        if not self._resent:
            parent = self._parent_notes
            if parent is None:
                parent = self._begun.parent.notes if self._begun.parent is not None else {}
            upstream = parent.get("upstream_id")
            unseen = len(self._begun.items)
        else:
            rec, k = self._tracker.ended_at(history)
            upstream = rec.notes.get("upstream_id") if rec is not None else None
            unseen = len(history) - k if upstream is not None else len(history)
        new = history[len(history) - unseen :]
        self._lanes.metrics.observe_items("input", new)
        clean = self._lanes.sanitized.apply(self.gate.tenant, history)  # item for item
        sent = sent_items(clean)
        return Forward(upstream, wire_items(clean[len(clean) - unseen :]), [i.raw for i in sent], sent)

    async def stream(
        self,
        upstream: Callable[[Forward], AsyncIterator[dict[str, Any]]],
        text: Callable[[dict[str, Any]], str | None],
        *,
        generate: bool = True,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The turn's exchange with the upstream model: what it is sent (`forward`), handed
        to `upstream`, and the events that returns, as they come, each piece of the model's
        text in them (`text(event)`; None: none) watched (`watch`) before the event is
        passed on. The caller finishes the turn (`finish`) at the terminal event."""
        events = upstream(self.forward(generate=generate))
        async with contextlib.aclosing(_scorer(self).watched(events, text)) as watched:
            async for event in watched:
                yield event

    async def watch(self, delta: str) -> list[str]:
        """Score a piece of the model's streamed text; flags (and returns) the categories
        it raises that the gate did not. Each character is scanned once."""
        return await _scorer(self).watch(delta)

    async def monitor(self) -> TurnVerdict | None:
        """Run the monitor lane on the turn now (None without monitor classifiers), for a
        stage built with `queue_monitor=False`; its flags are enforced on the next turn."""
        return await self._lanes.judge(self.gate, self.history)

    async def check_output(self, output: Sequence[Item]) -> TurnVerdict:
        """Append the model's output to the history and score it now, for a caller that
        must judge the answer before it is returned (a guard API). The verdict covers the
        whole conversation; `finish` then finds the output scored (cached). The output
        joins the history unscored (cheap) and goes to the monitor lane first."""
        self._tracker.append_output(self.gate.response_id, output)
        self._appended = True
        await self._lanes.watcher.submit_output(self.gate, output)
        tracked = await self._lanes.run(
            self._tracker.score_pending, self.gate.response_id, tenant=self.gate.tenant
        )
        return self._lanes.scorer.verdict(tracked.fold)

    def generating(self) -> None:
        """The upstream is asked for a response: until `finish` bills it, the input counted
        here is owed (kept in the billing journal, when the stage has one)."""
        if self._lanes.owe is not None:
            self._metered = self._lanes.owe(
                self.gate, lambda: Usage(sum(i.tokens for i in self.history), 0, 0)
            )

    async def finish(
        self, output: Sequence[Item] | Sequence[dict[str, Any]], usage: Usage | None, **notes: Any
    ) -> None:
        """Everything that follows the response, once, in order: the output joins the
        history (before the client can continue it), `notes` join the record (an
        `upstream_id` note also indexes the record by its history, for resent histories),
        the output is counted, and output scoring and billing are queued (not awaited;
        `usage` None: nothing to bill, nothing queued). `output`: the model's output as
        items, or as Responses API output objects (parsed with the write).

        The output is parsed and kept on a thread, in one write (a shared backend's round
        trips stay off the event loop). A caller cancelled meanwhile (the client left) does
        not lose what follows: it is queued once the write is done (`TurnLanes.settling`)."""
        if self.finished:
            raise LifecycleError(f"turn {self.gate.response_id} is already finished")
        self.finished = True
        if not output and not notes:
            return await self._queue([], False, usage)
        kept = asyncio.ensure_future(asyncio.to_thread(_keep_output, self, output, notes))
        try:
            items, appended = await asyncio.shield(kept)
        except asyncio.CancelledError:
            _queue_when_kept(self, kept, usage)
            raise
        await self._queue(items, appended, usage)

    async def _queue(self, output: list[Item], appended: bool, usage: Usage | None) -> None:
        """What follows the kept output: the monitor lane folds it (when it joined the
        history here), the post-inference lane scores and bills it."""
        if appended:
            await self._lanes.watcher.submit_output(self.gate, output)
        if usage is not None:
            await self._lanes.post(self.gate, output, usage)

    def annotate(self, *, index: bool = False, **notes: Any) -> None:
        """Keep `notes` on the turn's record, for its continuations; `index`: a resent
        history that ends where the record does finds it (`ConversationTracker.ended_at`)."""
        self._tracker.annotate(self.gate.response_id, notes, index=index)


def _scorer(turn: Turn) -> OutputStreamScorer:
    """The turn's scorer of its streamed text, made at the first piece (after `generating`,
    whose journal meters the text): the gate's stream classifiers, the gate's flags."""
    if turn._stream is None:
        lanes = turn._lanes
        turn._stream = OutputStreamScorer(
            [c for c in lanes.scorer.classifiers if c.name in lanes.stream_classifiers],
            flagged=turn.gate.verdict.flagged_categories,
            flag=functools.partial(lanes.flag_output, turn.gate),
            meter=turn._metered,
        )
    return turn._stream


def _keep_output(
    turn: Turn, output: Sequence[Item] | Sequence[dict[str, Any]], notes: dict[str, Any]
) -> tuple[list[Item], bool]:
    """(On a thread.) `Turn.finish`'s write: the output parsed (when it is wire objects),
    joined to the history with `notes` in one write (unless `check_output` appended it or
    the record has an output already), and counted; (the items, whether they joined)."""
    items = (
        parse_items(list(output), "output") if output and not isinstance(output[0], Item) else list(output)
    )
    appended = bool(items) and not turn._appended and turn._begun.outputs == 0
    if appended:
        turn._tracker.finish(turn.gate.response_id, items, notes, index="upstream_id" in notes)
    elif notes:
        turn.annotate(index="upstream_id" in notes, **notes)
    turn._lanes.metrics.observe_items("output", items)
    return items, appended


def _queue_when_kept(turn: Turn, kept: asyncio.Future[tuple[list[Item], bool]], usage: Usage | None) -> None:
    """`Turn.finish`'s caller was cancelled while the output was being kept: what follows
    is queued by a task of its own once it is (the stage's lanes wait for it as they close)."""

    async def later() -> None:
        try:
            await turn._queue(*await kept, usage)
        except Exception:
            log.exception("what follows response %s was not queued", turn.gate.response_id)

    task = asyncio.get_running_loop().create_task(later())
    turn._lanes.settling.add(task)
    task.add_done_callback(turn._lanes.settling.discard)
