"""The publisher's in-memory FIFO: order across its three parts, and the bytes it bounds."""

from __future__ import annotations

from deltaguard.kafka.held import HeldRecords, spool_bytes
from deltaguard.kafka.records import OutboundRecord, encode_key
from deltaguard.kafka.spool import max_line_size


def rec(i: int) -> OutboundRecord:
    return OutboundRecord("deltaguard.billing", encode_key("conv"), b'{"n":%d}' % i, f"e{i}")


def ids(records: list[OutboundRecord]) -> list[str]:
    return [r.event_id for r in records]


def test_batches_come_in_queue_order_and_acknowledged_records_let_go():
    held = HeldRecords()
    records = [rec(i) for i in range(5)]
    held.put(records)
    assert len(held) == 5 and held.unsent and held.nbytes == spool_bytes(records)
    batch = held.next_batch(3)
    assert ids(batch) == ["e0", "e1", "e2"] and len(held) == 5  # in flight still counts
    held.settle(batch, acknowledged=3)
    assert len(held) == 2 and held.nbytes == spool_bytes(records[3:])
    held.settle(held.next_batch(10), acknowledged=2)
    assert len(held) == 0 and not held.unsent and held.nbytes == 0


def test_a_failed_delivery_goes_back_first_in_line():
    held = HeldRecords()
    held.put([rec(i) for i in range(4)])
    batch = held.next_batch(3)
    held.settle(batch, acknowledged=1)  # e1 and e2 were not acknowledged
    held.put([rec(4)])
    assert ids(held.next_batch(10)) == ["e1", "e2"]  # stranded records first, alone
    held.settle(held.inflight, acknowledged=0)
    assert ids(held.take_all()) == ["e1", "e2", "e3", "e4"]


def test_take_all_keeps_the_order_in_flight_stranded_queued():
    held = HeldRecords()
    held.put([rec(0), rec(1)])
    held.strand([rec(8), rec(9)])  # memory the spool had no room for: first in line
    batch = held.next_batch(1)
    assert ids(batch) == ["e8"]
    held.put([rec(2)])
    assert ids(held.take_all()) == ["e8", "e9", "e0", "e1", "e2"]
    assert len(held) == 0 and held.nbytes == 0 and held.inflight == []


def test_put_counts_the_size_it_is_given():
    held = HeldRecords()
    held.put([rec(0)], nbytes=max_line_size(rec(0)))
    held.strand([rec(1)])
    assert held.nbytes == max_line_size(rec(0)) + max_line_size(rec(1))
