"""Distributed mode on Kafka (docs/contract.md section 5).

- `settings.KafkaSettings`: every setting (topics, partitions, timeouts, spool, ...).
- `topics`: creates the topics explicitly, with their partition counts.
- `sink.KafkaEventSink`: the gateway's publisher (an `EventSink`); spools to disk
  (`spool.Spool`) while the broker is out; `held.HeldRecords`: what it holds in memory.
- `subscriber.FlagSubscriber`: monitor-lane flags back to the gateway (`mark_flagged`),
  and the verdicts of the turns it holds (`lanes.awaited_verdicts.AwaitedVerdicts`).
- `worker`: the faust-streaming worker (`deltaguard worker`); `monitor`: its scoring,
  pure and broker-free; `records`: wire values and the `TurnError` dead letters.
- `boundary`: the one place aiokafka's errors become DeltaGuard's; `command`: the
  `deltaguard worker` command's arguments and body.

Transcripts as turn events, and tansu and worker processes on 127.0.0.1, are test
support (`tests/support/turn_events.py`, `tests/support/kafka.py`), not shipped.

Nothing is imported here, and only `worker` imports faust (heavy, and with import-time
state of its own).
"""
