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
├── RequestError               a request the gateway refuses (HTTP status, error code)
│   ├── SafetyBlocked          the safety stage blocked the turn
│   └── MonitorVerdictPending  the verdict on the conversation's last turn is late (retry)
├── UpstreamError              the upstream model failed or stalled
└── KafkaPathError             the Kafka path failed
    ├── BrokerUnavailable      the broker could not be reached or refused a request
    └── TopicMismatch          a topic exists with a partition count other than configured

Foreign errors (aiokafka, onnxruntime, httpx, sqlite3) never leave the adapter that calls
the library: each translates them at one boundary, `raise ... from exc`, so the original
stays in the traceback (`deltaguard.kafka.boundary`, `deltaguard.gateway.upstreams.transport`,
`deltaguard.classifiers.encoder`, `deltaguard.recording`, `deltaguard.state.backends`).
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


class RequestError(DeltaGuardError):
    """A request the gateway refuses: HTTP status, error type and code for the client."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.status = status
        self.type = type

    def to_error(self) -> dict[str, Any]:
        return {"type": self.type, "code": self.code, "message": self.message, "param": self.param}


class SafetyBlocked(RequestError):
    def __init__(self, categories: list[str], *, reason: str | None = None) -> None:
        """`reason`: what was blocked, when it was not the request itself (one of the
        model's actions); said in the message and in the error object."""
        what = "The model's action was" if reason else "The request was"
        super().__init__(
            f"{what} blocked by the safety stage: {', '.join(categories)}{f': {reason}' if reason else ''}.",
            code="safety_blocked",
            status=400,
        )
        self.categories = categories
        self.reason = reason

    def to_error(self) -> dict[str, Any]:
        return {
            **super().to_error(),
            "categories": self.categories,
            **({"reason": self.reason} if self.reason else {}),
        }

    @classmethod
    def from_error(cls, error: dict[str, Any]) -> SafetyBlocked:
        """The refusal an error object describes (a response that failed mid-stream, told to
        a JSON client): its categories, and its reason when it has one."""
        reason = error.get("reason")
        return cls(list(error.get("categories") or []), reason=reason if isinstance(reason, str) else None)


class MonitorVerdictPending(RequestError):
    """A turn refused because the monitor verdicts pending on its conversation did not come
    within the wait's deadline (`deltaguard.lanes.verdicts`, policy "refuse"): a 503 that
    clients retry (the OpenAI SDK does on its own)."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(
            f"The safety verdict on this conversation's previous turn is not in after {waited_s:.1f} s; "
            "retry the request.",
            code="monitor_verdict_pending",
            status=503,
            type="server_error",
        )
        self.waited_s = waited_s


class ConversationLocked(SafetyBlocked):
    """A refusal of a locked conversation (or client): it says so, why, and until when."""

    def __init__(self, categories: list[str], why: str, until: float) -> None:
        super().__init__(categories)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until))
        self.message = f"This conversation is locked: {why} ({', '.join(categories)}); locked until {stamp}."
        self.args = (self.message,)
        self.locked_until = int(until)

    def to_error(self) -> dict[str, Any]:
        return {**super().to_error(), "locked_until": self.locked_until}


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
