"""Errors of the Kafka path, under DeltaGuard's tree (pipeline/errors.py).

DeltaGuardError
├── SinkFull               (pipeline/errors.py) the publisher's spool is full
└── KafkaPathError
    ├── BrokerUnavailable  the broker could not be reached or refused a request
    └── TopicMismatch      a topic exists with a partition count other than configured

aiokafka's own exceptions never leave this package: they are translated where the
call is made, with `raise ... from exc` so the original stays in the traceback.
"""

from __future__ import annotations

from pipeline.errors import DeltaGuardError


class KafkaPathError(DeltaGuardError):
    """Base class of the Kafka path's errors."""


class BrokerUnavailable(KafkaPathError):
    def __init__(self, broker: str, what: str) -> None:
        super().__init__(f"kafka broker {broker}: {what}")
        self.broker = broker


class TopicMismatch(KafkaPathError):
    def __init__(self, topic: str, expected: int, found: int) -> None:
        super().__init__(
            f"topic {topic!r} has {found} partitions, settings say {expected}: conversations would move "
            "between partitions and lose their state; recreate the topic or fix the settings"
        )
        self.topic = topic
        self.expected = expected
        self.found = found
