"""DeltaGuard's exception tree: every error the project raises on purpose.

DeltaGuardError
├── ItemError                  an item has the wrong shape (names the field)
├── TranscriptError            a transcript line cannot be used (file, line, field)
├── PreviousResponseNotFound   a continuation can be neither resumed nor rebuilt
├── ModelArtifactError         a model artifact is missing, its hash is wrong, or it fails to run
├── ClassifierNotLoadedError   a classifier was used before `load()`
│   ├── LexicalNotLoadedError
│   ├── EncoderNotLoadedError
│   └── ConversationNotLoadedError
├── PolicyError                a policy file cannot be used (file, field)
├── LaneClosed                 work submitted to a lane that is shutting down
├── LifecycleError             a component asked to start or close out of order (also a RuntimeError)
├── SinkFull                   a bounded sink or spool refused an event
├── RecordingStoreError        the recording store cannot be used
├── StateBackendError          the conversation state backend cannot be used (bad URL, unreachable)
├── TurnBlocked                the safety stage refused a turn (categories; a lock-out's why and until when)
├── MonitorVerdictPending      the verdict on the conversation's last turn is late (retry)
├── UpstreamError              the upstream model failed or stalled
└── KafkaPathError             the Kafka path failed
    ├── BrokerUnavailable      the broker could not be reached or refused a request
    └── TopicMismatch          a topic exists with a partition count other than configured

Foreign errors (aiokafka, onnxruntime, httpx, sqlite3) never leave the adapter that calls
the library: each translates them at one boundary, `raise ... from exc`, so the original
stays in the traceback (`deltaguard.kafka.boundary`, `deltaguard.gateway.upstreams.transport`,
`deltaguard.classifiers.encoder`, `deltaguard.recording`, `deltaguard.state.backends`).

None of these knows HTTP. A refusal in HTTP terms (status, error type and code) is the
gateway's `RequestError` (`deltaguard.gateway.http_errors`, a DeltaGuardError too), and the
gateway tells a client of any error in one place (`deltaguard.gateway.error_exits`).
"""

from __future__ import annotations

import time
from typing import Any


class DeltaGuardError(Exception):
    """Base class of every error DeltaGuard raises on purpose."""


class ItemError(DeltaGuardError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class TranscriptError(DeltaGuardError):
    def __init__(self, path: str, line: int, field: str, reason: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {reason}")
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason


class PreviousResponseNotFound(DeltaGuardError):
    code = "previous_response_not_found"

    def __init__(self, response_id: str) -> None:
        super().__init__(f"previous response {response_id!r} is unknown, expired, or its history was evicted")
        self.response_id = response_id


class ModelArtifactError(DeltaGuardError):
    pass


class ClassifierNotLoadedError(DeltaGuardError):
    """`update` was called on a classifier whose `load()` has not run."""


class LexicalNotLoadedError(ClassifierNotLoadedError):
    pass


class EncoderNotLoadedError(ClassifierNotLoadedError):
    pass


class ConversationNotLoadedError(ClassifierNotLoadedError):
    pass


class PolicyError(DeltaGuardError):
    pass


class LaneClosed(DeltaGuardError):
    pass


class LifecycleError(DeltaGuardError, RuntimeError):
    """A component was asked to start twice, or after it closed (`deltaguard.worker.Lifecycle`)."""


class SinkFull(DeltaGuardError):
    pass


class RecordingStoreError(DeltaGuardError):
    """The recording store cannot be used (not a DeltaGuard store, newer schema, missing)."""


class StateBackendError(DeltaGuardError):
    """The conversation state backend cannot be used: a bad `--state` URL, a file that cannot
    be opened, a Redis server that cannot be reached."""


class TurnBlocked(DeltaGuardError):
    """The safety stage refused a turn, for `categories`. A refusal by a lock-out (of the
    conversation, or of the client) also says why (`why`) and until when (`until`, epoch s).

    >>> str(TurnBlocked(["secrets"]))
    'The request was blocked by the safety stage: secrets.'
    >>> TurnBlocked(["jailbreak"], why="3 turns were blocked", until=0).message
    'This conversation is locked: 3 turns were blocked (jailbreak); locked until 1970-01-01T00:00:00Z.'
    """

    def __init__(
        self,
        categories: list[str],
        *,
        why: str | None = None,
        until: float | None = None,
        reason: str | None = None,
    ) -> None:
        """`reason`: what was blocked, when it was not the request itself (one of the
        model's actions); said in the message."""
        self.categories = categories
        self.why = why
        self.reason = reason
        self.locked_until = None if until is None else int(until)
        named = ", ".join(categories)
        if until is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until))
            self.message = f"This conversation is locked: {why} ({named}); locked until {stamp}."
        elif reason:
            self.message = f"The model's action was blocked by the safety stage: {named}: {reason}."
        else:
            self.message = f"The request was blocked by the safety stage: {named}."
        super().__init__(self.message)

    @classmethod
    def from_error(cls, error: dict[str, Any]) -> TurnBlocked:
        """The refusal an error object describes (a response that failed mid-stream, told to
        a JSON client): its categories, and its reason when it has one."""
        reason = error.get("reason")
        return cls(list(error.get("categories") or []), reason=reason if isinstance(reason, str) else None)


# Its earlier name, still importable.
SafetyBlocked = TurnBlocked


class MonitorVerdictPending(DeltaGuardError):
    """A turn refused because the monitor verdicts pending on its conversation did not come
    within the wait's deadline (`deltaguard.lanes.pending_verdicts`, policy "refuse"): the gateway
    answers 503 `monitor_verdict_pending`, which clients retry (the OpenAI SDK on its own)."""

    def __init__(self, waited_s: float) -> None:
        self.waited_s = waited_s
        super().__init__(
            f"The safety verdict on this conversation's previous turn is not in after {waited_s:.1f} s; "
            "retry the request."
        )


class UpstreamError(DeltaGuardError):
    """The upstream model failed or stalled; the client gets a clear error."""


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
