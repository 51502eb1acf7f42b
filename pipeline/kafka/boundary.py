"""The one place aiokafka's errors become DeltaGuard's (`deltaguard.errors`).

    with broker_errors(settings.broker, "topic admin"):
        await admin.create_topics(...)

A `KafkaError` or an `OSError` (connection refused, reset) inside the block leaves it as
`BrokerUnavailable`, with the original chained (`raise ... from exc`); cancellation and
DeltaGuard's own errors pass through unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiokafka.errors import KafkaError

from deltaguard.errors import BrokerUnavailable

# What a caller that retries (the publisher, the flag subscriber) treats as a broker outage.
BROKER_FAILURES: tuple[type[BaseException], ...] = (KafkaError, OSError)


@contextlib.contextmanager
def broker_errors(broker: str, what: str) -> Iterator[None]:
    try:
        yield
    except KafkaError as exc:
        raise BrokerUnavailable(broker, f"{what} failed: {exc!r}") from exc
    except OSError as exc:
        raise BrokerUnavailable(broker, f"{what}: unreachable: {exc}") from exc
