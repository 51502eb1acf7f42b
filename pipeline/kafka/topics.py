"""Creating DeltaGuard's topics explicitly, with the partition counts of the settings.

Relying on broker auto-creation gives whatever the broker's default is (tansu: 4
partitions), and the turns topic and the table's changelog must have the same count
(the worker that owns turns partition N recovers changelog partition N). So topics are
created up front with the admin client; an existing topic with another count is an
error for the co-partitioned pair and a warning for the others.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from deltaguard.errors import BrokerUnavailable, TopicMismatch
from deltaguard.kafka.boundary import broker_errors
from deltaguard.kafka.settings import KafkaSettings

log = logging.getLogger("deltaguard.kafka.topics")

_TOPIC_ALREADY_EXISTS = 36


async def ensure_topics(settings: KafkaSettings, topics: Mapping[str, int] | None = None) -> list[str]:
    """Create the missing topics; returns the names created.

    `topics` defaults to every topic of the settings (`KafkaSettings.topic_partitions`).
    Raises `TopicMismatch` when the turns topic or the changelog exists with another
    partition count, `BrokerUnavailable` when the broker cannot be reached.
    """
    wanted = dict(topics if topics is not None else settings.topic_partitions())
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.client_id}-admin",
        request_timeout_ms=int(settings.request_timeout_s * 1000),
    )
    try:
        with broker_errors(settings.broker, "topic admin"):
            await admin.start()
            response = await admin.create_topics(
                [
                    NewTopic(name, partitions, settings.replication_factor)
                    for name, partitions in wanted.items()
                ]
            )
            created = []
            existing = []
            for name, code, message in response.topic_errors:
                if code == 0:
                    created.append(name)
                elif code == _TOPIC_ALREADY_EXISTS:
                    existing.append(name)
                else:
                    raise BrokerUnavailable(
                        settings.broker, f"creating topic {name!r} failed: {code} {message}"
                    )
            if existing:
                await _check_partitions(admin, settings, {name: wanted[name] for name in existing})
    finally:
        await admin.close()
    if created:
        log.info("created topics %s", ", ".join(f"{n}({wanted[n]})" for n in created))
    return created


async def _check_partitions(
    admin: AIOKafkaAdminClient, settings: KafkaSettings, expected: Mapping[str, int]
) -> None:
    strict = {settings.turns_topic, settings.changelog_topic}
    for desc in await admin.describe_topics(list(expected)):
        name = desc["topic"]
        found = len(desc.get("partitions") or [])
        if found == expected[name]:
            continue
        if name in strict:
            raise TopicMismatch(name, expected[name], found)
        log.warning("topic %s has %d partitions, settings say %d", name, found, expected[name])
