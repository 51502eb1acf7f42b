"""The recorder: flag events in, one recording per flagged branch out, off the response path.

One recording per flagged *branch*, not per flag: after the first flag of a
conversation, the following turns usually carry the same flag (scores are
conversation-level), so a later flag with no new category and no harsher decision only
adds its event to the recording; a new category, or `flag` becoming `block`, extends
the recording to the new turn; a flag on another branch (`previous_response_id`
forks) gets its own recording. Re-recording costs one fold of the history, so this
keeps the recorder's work bounded by the number of distinct flags, not by turns.

Each record's items are split into the turn's input and the model's output by the
trailing run of the model's items (messages and function calls the client did not send),
because a `ResponseRecord` keeps them in one tuple; the recorded verdicts are computed
on the transcript as written, each turn's scores with its output as `replay` reports
them, so replaying it with the same policy and models reproduces them exactly; each row
also keeps every item's own scores (`item_scores`, input items then output items), taken
before redaction.
Finding previews are dropped from the stored verdicts when redacting, since they show
a few characters of the value, and located findings' character ranges are moved onto
the redacted text, so that they point into the transcript as recorded.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deltaguard.events import FlagEvent
from deltaguard.items import Item
from deltaguard.recording.redaction import Redactions, redact_items, redacted_range
from deltaguard.recording.store import RecordedTranscript, RelatedRecording, TranscriptStore
from deltaguard.state.policy import ordered_categories
from deltaguard.state.scoring import Scorer, turn_json
from deltaguard.state.store import ResponseRecord
from deltaguard.worker import BoundedWorker, Lifecycle, Retry

log = logging.getLogger("deltaguard.recording")

_DECISION_RANK = {"allow": 0, "flag": 1, "block": 2}


def _chain(record: ResponseRecord) -> list[ResponseRecord]:
    out = []
    node: ResponseRecord | None = record
    while node is not None:
        out.append(node)
        node = node.parent
    out.reverse()
    return out


def split_turn(items: Sequence[Item]) -> tuple[Sequence[Item], Sequence[Item]]:
    """(input, output) of one response's items: output is the trailing run of the model's
    items (an assistant message the client sent is input: a forged turn, judged as such)."""
    k = len(items)
    while k > 0 and items[k - 1].role == "assistant" and not items[k - 1].from_client:
        k -= 1
    return items[:k], items[k:]


@dataclass(frozen=True, slots=True)
class _Job:
    event: FlagEvent
    record: ResponseRecord
    tenant: str | None


Outcome = Literal["inserted", "extended", "appended"]


class TranscriptRecorder:
    """Records flagged conversations into a `TranscriptStore`, off the response path.

    `submit` queues (and waits only when the bounded queue is full, like the sinks);
    one task hands each job to one writer thread, which owns the SQLite connection.
    `record` is the same work done synchronously (tests, tools).

        recorder = TranscriptRecorder("flags.db", scorer, redact=True)
        stage = SafetyStage(scorer, recorder=recorder)   # started and drained by the stage

    `scorer` is the full scorer the stage was built from (every lane's classifiers and
    the policy): the recorded verdicts are computed with it.
    """

    def __init__(
        self,
        path: Path | str,
        scorer: Scorer,
        *,
        redact: bool = True,
        max_conversations: int = 10_000,
        max_age_s: float | None = 30 * 24 * 3600.0,
        tenant: str | None = None,
        queue_size: int = 1024,
        retries: int = 3,
        clock: Any = time.time,
    ) -> None:
        self.path = Path(path)
        self.scorer = scorer
        self.redact = redact
        self.max_conversations = max_conversations
        self.max_age_s = max_age_s
        self.tenant = tenant
        self.queue_size = queue_size
        self.retries = retries
        self.clock = clock
        self.recorded = 0  # jobs written (inserted, extended or appended)
        self._store: TranscriptStore | None = None
        self._lock = threading.Lock()
        self._worker: BoundedWorker[_Job] = BoundedWorker(
            "recorder",
            self._record_batch,
            maxsize=queue_size,
            retry=Retry(retries, initial_s=0.1, max_s=math.inf),
            log=log,
            describe=lambda jobs: f"recording of flag {jobs[0].event.event_id}",
        )

    @property
    def failures(self) -> int:
        """Jobs given up after `retries` attempts."""
        return self._worker.dropped

    # -- synchronous core (one thread at a time)

    def _open_store(self) -> TranscriptStore:
        if self._store is None:
            self._store = TranscriptStore(
                self.path,
                max_conversations=self.max_conversations,
                max_age_s=self.max_age_s,
                clock=self.clock,
            ).open()
        return self._store

    def record(self, event: FlagEvent, record: ResponseRecord, tenant: str | None = None) -> Outcome:
        """Record `event`'s conversation as of `record` (see the module docstring)."""
        if self.redact and event.findings:  # previews show what redaction hides
            kept = [{k: v for k, v in f.items() if k != "preview"} for f in event.findings]
            event = event.model_copy(update={"findings": kept})
        with self._lock:
            store = self._open_store()
            tenant = tenant if tenant is not None else self.tenant
            chain = _chain(record)
            ids = [r.response_id for r in chain]
            target: RelatedRecording | None = None
            for rel in store.related(tenant, event.conversation_id):
                ends_here = rel.response_ids == ids[: len(rel.response_ids)]
                covers = ids == rel.response_ids[: len(ids)]
                if not (ends_here or covers):
                    continue  # another branch of the conversation
                categories = sorted(set(rel.categories) | set(event.categories))
                decision = max(rel.decision, event.decision, key=_DECISION_RANK.__getitem__)
                if covers or (set(categories) == set(rel.categories) and decision == rel.decision):
                    store.add_flag(rel.id, event, _ordered(categories), decision)
                    self.recorded += 1
                    return "appended"
                target = rel
                break
            categories = _ordered(set(event.categories) | set(target.categories if target else ()))
            decision = event.decision
            if target is not None:
                decision = max(target.decision, decision, key=_DECISION_RANK.__getitem__)
            entry = self.build_entry(event.conversation_id, chain, tenant, categories, decision)
            store.save(entry, event, replace=target.id if target else None)
            self.recorded += 1
            return "extended" if target else "inserted"

    def build_entry(
        self,
        conversation_id: str,
        chain: Sequence[ResponseRecord],
        tenant: str | None,
        categories: list[str],
        decision: str,
    ) -> dict[str, Any]:
        """A recording's columns: transcript (redacted if asked), verdicts, metadata."""
        turns = [split_turn(r.items) for r in chain]
        verdicts = []
        scorer = self.scorer
        snapshot = scorer.empty()
        for t, (inputs, outputs) in enumerate(turns):
            fold = scorer.fold(snapshot, inputs)
            out = scorer.fold(fold.after, outputs) if outputs else None
            row = turn_json(t, scorer.verdict(fold, output=out))  # as `replay` reports a turn
            # Each item's own scores, as scored (before any redaction): what calibration
            # reads, since a redacted secret cannot be found again by replaying the text.
            row["item_scores"] = [_rounded(s) for s in (*fold.item_scores, *(out.item_scores if out else ()))]
            if self.redact:
                for f in row.get("findings", []):
                    f.pop("preview", None)
            verdicts.append(row)
            snapshot = out.after if out is not None else fold.after
        flat = [item for inputs, outputs in turns for item in (*inputs, *outputs)]
        redactions = Redactions()
        if self.redact:
            wire, redactions = redact_items(flat)
            _move_findings(verdicts, turns, redactions)
        else:
            wire = [copy.deepcopy(i.raw) for i in flat]
        out_turns: list[dict[str, Any]] = []
        redacted_turns: list[int] = []
        at = 0
        for t, (inputs, outputs) in enumerate(turns):
            turn: dict[str, Any] = {"input": wire[at : at + len(inputs)]}
            if outputs:
                turn["output"] = wire[at + len(inputs) : at + len(inputs) + len(outputs)]
            if any(at <= n < at + len(inputs) + len(outputs) for n in redactions.items):
                redacted_turns.append(t)
            at += len(inputs) + len(outputs)
            out_turns.append(turn)
        ids = [r.response_id for r in chain]
        transcript = {
            "id": conversation_id,
            "turns": out_turns,
            "recorded": {"tenant": tenant, "response_ids": ids, "redacted": self.redact},
        }
        return {
            "tenant": tenant,
            "conversation_id": conversation_id,
            "response_id": ids[-1],
            "response_ids": ids,
            "decision": decision,
            "categories": categories,
            "redacted": self.redact,
            "redactions": {
                "kinds": redactions.kinds,
                "categories": sorted(redactions.categories),
                "turns": redacted_turns,  # turns with an item changed by redaction
                "kind_categories": redactions.kind_categories,  # which mask is which category
            },
            "classifier_versions": scorer.versions,
            "policy": scorer.policy.model_dump(mode="json"),
            "transcript": transcript,
            "verdicts": verdicts,
        }

    def read(self, conversation_id: str | None = None) -> list[RecordedTranscript]:
        with self._lock:
            return self._open_store().read(conversation_id)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    # -- asynchronous front (the stage's hook)

    async def start(self) -> None:
        self._worker.state.to(Lifecycle.RUNNING, "recorder")  # a second start fails here, before any work
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltaguard-recorder")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._open_store)  # fail at startup, not later
        except BaseException:
            self._executor.shutdown(wait=False)
            await self._worker.aclose(time.monotonic())
            raise
        self._worker.start()

    @property
    def depth(self) -> int:
        return self._worker.depth

    async def submit(self, event: FlagEvent, record: ResponseRecord, tenant: str | None = None) -> None:
        """Queue a recording; waits only when the queue is full (backpressure)."""
        await self._worker.put(_Job(event, record, tenant))

    async def _record_batch(self, jobs: list[_Job]) -> None:
        [job] = jobs
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.record, job.event, job.record, job.tenant)

    async def aclose(self, timeout_s: float = 10.0) -> int:
        """Drain the queue (up to `timeout_s`), then close; returns jobs left unrecorded."""
        if self._worker.state is not Lifecycle.RUNNING:
            await self._worker.aclose(time.monotonic())
            return 0
        try:
            left = await self._worker.aclose(time.monotonic() + timeout_s)
        finally:
            # The writer thread finishes a recording cut short at the deadline (so it is
            # not counted as left) before it closes the store.
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self.close)
            self._executor.shutdown(wait=True)
        return len(left.queued)


def _move_findings(
    verdicts: list[dict[str, Any]],
    turns: Sequence[tuple[Sequence[Item], Sequence[Item]]],
    redactions: Redactions,
) -> None:
    """Move located findings onto the redacted text, as the transcript records it; a range
    in an item whose text changed in a way that cannot be followed is marked `redacted`
    (it counts in the text before redaction). Attached files are recorded as sent."""
    at = 0
    for row, (inputs, outputs) in zip(verdicts, turns, strict=True):
        for f in row.get("findings", []):
            n = f.get("item")
            if f.get("start") is None or not isinstance(n, int) or not 0 <= n < len(inputs):
                continue
            if str(f.get("kind", "")).endswith("/attachment") or at + n not in redactions.items:
                continue
            cuts = redactions.edits.get(at + n)
            if cuts is None:
                f["redacted"] = True
            else:
                f["start"], f["end"] = redacted_range(cuts, f["start"], f["end"])
        at += len(inputs) + len(outputs)


def _rounded(scores: dict[str, float]) -> dict[str, float]:
    return {c: round(s, 6) for c, s in scores.items() if s > 0.0}


def _ordered(categories: Any) -> list[str]:
    return ordered_categories(dict.fromkeys(categories, 0.0))
