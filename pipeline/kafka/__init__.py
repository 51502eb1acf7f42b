"""Distributed mode on Kafka (CONTRACT.md section 5).

- `settings.KafkaSettings`: every setting (topics, partitions, timeouts, spool, ...).
- `topics.ensure_topics`: creates the topics explicitly, with their partition counts.
- `sink.KafkaEventSink`: the gateway's publisher (an `EventSink`); spools to disk when
  the broker is out.
- `subscriber.FlagSubscriber`: monitor-lane flags back to the gateway.
- `worker`: the faust-streaming worker (`deltaguard worker`); `monitor`: its scoring.

Nothing is imported here: faust is heavy and only the worker needs it.
"""
