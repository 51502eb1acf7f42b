"""Billing that survives the process: an append-only journal of billing events.

The billing event of a response is written here from the moment its generation starts
(a provisional event: the input DeltaGuard counted, no output yet) and again when the
response completes (the model's usage), until the billing sink has taken it. A process
killed meanwhile (kill -9, an out-of-memory kill) loses none: the next start on the same
journal re-sends every event the sink never confirmed, the newest version of each.

While the answer streams, the output counted so far is journalled too (`OutputMeter`):
once `JournalCadence.every_tokens` tokens have streamed since the last write, or
`every_s` after it, one append each time (never one per token), so the event a kill
leaves behind bills the input and the output streamed until then, less at most one
interval's worth.

Events keep their stable ids (`stable_event_id("billing", response_id)`), so a consumer
that dedupes by id never counts one twice, even when the sink had taken an event whose
confirmation the kill cut off. Writes are single `os.write` calls on an append-only
descriptor: they reach the kernel at once, which is what a killed process needs (the
machine itself going down is the sink's business, or `fsync=True`'s). A torn last line
(killed in the middle of a write) is skipped at recovery. The file is rewritten to what
is still owed at every start and whenever it outgrows `compact_bytes`, so it stays small.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from deltaguard import defaults
from deltaguard.events import BillingEvent, Event
from deltaguard.items import count_tokens

log = logging.getLogger("deltaguard.journal")
COMPACT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class JournalCadence:
    """How often a streaming answer's output count is journalled: once `every_tokens`
    tokens have streamed since the last write, or at the first token `every_s` after it."""

    every_tokens: int = defaults.JOURNAL_EVERY_TOKENS
    every_s: float = defaults.JOURNAL_EVERY_S

    def __post_init__(self) -> None:
        if self.every_tokens < 1 or not self.every_s > 0:
            raise ValueError(
                f"journal cadence: every_tokens must be >= 1 and every_s > 0, got {self.every_tokens}"
                f" and {self.every_s}"
            )


class BillingJournal:
    """`path`: the journal file (created, with its folder, when missing); `cadence`: how
    often a streaming answer's output count is written (`meter`)."""

    def __init__(
        self,
        path: Path | str,
        *,
        fsync: bool = False,
        compact_bytes: int = COMPACT_BYTES,
        cadence: JournalCadence | None = None,
    ) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.compact_bytes = compact_bytes
        self.cadence = cadence or JournalCadence()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._owed: dict[str, BillingEvent] = {}  # what the file holds that is still owed
        self._streaming: set[str] = set()  # ids whose owed event an `OutputMeter` moves on
        self._size = 0

    def recover(self) -> list[BillingEvent]:
        """The events the sink never confirmed, the newest version of each (in the order
        those were written); the journal is rewritten to hold only them, then opened."""
        outstanding: dict[str, BillingEvent] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                self._replay(line, outstanding)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._owed = dict(outstanding)
            self._rewrite()
        if outstanding:
            log.warning(
                "billing journal %s: %d events not confirmed before, re-sent", self.path, len(outstanding)
            )
        return list(outstanding.values())

    def note(self, event: BillingEvent) -> None:
        """`event` is owed (a newer version of an id replaces the older one, and ends
        what a meter of it writes: this is the event's usage as the model reported it)."""
        with self._lock:
            self._streaming.discard(event.event_id)
            self._owe(event)

    def meter(self, owed: BillingEvent, clock: Callable[[], float] = time.monotonic) -> OutputMeter:
        """`owed` (a generation's provisional event: its input) is owed, and the output
        streamed from now on is counted into it at the journal's cadence."""
        with self._lock:
            self._streaming.add(owed.event_id)
            self._owe(owed)
        return OutputMeter(self, owed, clock)

    def progress(self, event: BillingEvent) -> None:
        """A meter's newer count; dropped once the event was noted whole or delivered."""
        with self._lock:
            if event.event_id in self._streaming:
                self._owe(event)

    def _owe(self, event: BillingEvent) -> None:
        """(Under the lock.)"""
        self._owed.pop(event.event_id, None)
        self._owed[event.event_id] = event
        self._write(_line({"bill": event.model_dump(mode="json")}))

    def done(self, events: Sequence[Event]) -> None:
        """The sink has taken `events` (other kinds than billing are ignored)."""
        ids = [e.event_id for e in events if isinstance(e, BillingEvent)]
        if not ids:
            return
        with self._lock:
            for event_id in ids:
                self._owed.pop(event_id, None)
                self._streaming.discard(event_id)
            self._write(_line({"done": ids}))
            if self._size > self.compact_bytes:
                self._rewrite()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _write(self, data: str) -> None:
        """(Under the lock.)"""
        if self._fd is None:
            raise RuntimeError(f"billing journal {self.path} is not open: call recover() first")
        raw = data.encode("utf-8")
        os.write(self._fd, raw)
        self._size += len(raw)
        if self.fsync:
            os.fsync(self._fd)

    def _rewrite(self) -> None:
        """(Under the lock.) The file replaced by what is still owed, then reopened."""
        text = "".join(_line({"bill": e.model_dump(mode="json")}) for e in self._owed.values())
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = len(text.encode("utf-8"))

    @staticmethod
    def _replay(line: str, outstanding: dict[str, BillingEvent]) -> None:
        try:
            record = json.loads(line)
            if "bill" in record:
                event = BillingEvent.model_validate(record["bill"])
                outstanding.pop(event.event_id, None)
                outstanding[event.event_id] = event
            for event_id in _ids(record.get("done", ())):
                outstanding.pop(event_id, None)
        except (json.JSONDecodeError, ValidationError, AttributeError, TypeError):
            log.warning("billing journal: skipping an unreadable line (%.80r)", line)


class OutputMeter:
    """One generation's streamed output, counted (`deltaguard.items.count_tokens`, per
    piece as it arrives) and journalled into its owed event at the journal's cadence."""

    def __init__(self, journal: BillingJournal, owed: BillingEvent, clock: Callable[[], float]) -> None:
        self._journal = journal
        self._owed = owed
        self._clock = clock
        self.tokens = 0  # counted so far
        self._written = 0  # of which journalled
        self._written_at = clock()

    def streamed(self, text: str) -> None:
        """A piece of the answer reached the client's stream."""
        self.tokens += count_tokens(text)
        cadence = self._journal.cadence
        new = self.tokens - self._written
        if new >= cadence.every_tokens or (new > 0 and self._clock() - self._written_at >= cadence.every_s):
            self._written, self._written_at = self.tokens, self._clock()
            self._journal.progress(self._owed.model_copy(update={"output_tokens": self.tokens}))


def _ids(value: Iterable[object]) -> list[str]:
    return [v for v in value if isinstance(v, str)]


def _line(record: dict[str, object]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"
