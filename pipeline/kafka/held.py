"""`HeldRecords`: what the Kafka publisher holds in memory, in front of its spool.

Three parts, oldest first: the batch in flight (sent, not yet acknowledged), the
stranded records (a failed delivery's rest, or memory the spool had no room for at an
outage: first in line on reconnect) and the queue `send()` fills. `nbytes` bounds the
spool bytes they would take, so the spool can keep that much room for them.

    >>> from deltaguard.kafka.records import OutboundRecord
    >>> held = HeldRecords()
    >>> held.put([OutboundRecord("t", b"k", b"{}", f"e{n}") for n in range(3)])
    >>> batch = held.next_batch(2)
    >>> held.settle(batch, acknowledged=1)  # the second one goes back, first in line
    >>> [r.event_id for r in held.take_all()], held.nbytes
    (['e1', 'e2'], 0)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from deltaguard.kafka.records import OutboundRecord
from deltaguard.kafka.spool import max_line_size


def spool_bytes(records: Sequence[OutboundRecord]) -> int:
    """An upper bound of the bytes `records` take in the spool."""
    return sum(max_line_size(r) for r in records)


class HeldRecords:
    """The publisher's in-memory FIFO (see the module docstring); one event loop owns it."""

    def __init__(self) -> None:
        self.queue: deque[OutboundRecord] = deque()
        self.stranded: deque[OutboundRecord] = deque()
        self.inflight: list[OutboundRecord] = []
        self.nbytes = 0  # upper bound of the spool bytes these records would take

    def __len__(self) -> int:
        return len(self.queue) + len(self.stranded) + len(self.inflight)

    @property
    def unsent(self) -> bool:
        """Whether records wait to be sent (the batch in flight aside)."""
        return bool(self.stranded or self.queue)

    def put(self, records: Sequence[OutboundRecord], nbytes: int | None = None) -> None:
        """Queue records behind everything held (`nbytes`: their `spool_bytes`, when known)."""
        self.queue.extend(records)
        self.nbytes += spool_bytes(records) if nbytes is None else nbytes

    def strand(self, records: Sequence[OutboundRecord]) -> None:
        """Put records first in line, before everything held."""
        self.stranded.extendleft(reversed(records))
        self.nbytes += spool_bytes(records)

    def next_batch(self, max_records: int) -> list[OutboundRecord]:
        """Up to `max_records` to send next, stranded ones first; they are in flight until
        `settle`."""
        source = self.stranded if self.stranded else self.queue
        batch: list[OutboundRecord] = []
        while source and len(batch) < max_records:
            batch.append(source.popleft())
        self.inflight = batch
        return batch

    def settle(self, batch: Sequence[OutboundRecord], acknowledged: int) -> None:
        """The broker acknowledged the first `acknowledged` of `batch`, in order: they are
        let go; the rest goes back, first in line."""
        self.inflight = []
        self.nbytes -= spool_bytes(batch[:acknowledged])
        self.stranded.extendleft(reversed(batch[acknowledged:]))

    def take_all(self) -> list[OutboundRecord]:
        """Everything held, oldest first, removed from memory."""
        out = [*self.inflight, *self.stranded, *self.queue]
        self.nbytes = 0
        self.inflight = []
        self.stranded.clear()
        self.queue.clear()
        return out
