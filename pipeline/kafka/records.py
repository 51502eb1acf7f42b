"""What goes on the wire: JSON values, keys, the topic of each event kind, error records.

Values are the events' JSON (`model_dump(mode="json")`), ASCII-escaped so that any
string (even a lone surrogate from a broken client) encodes; keys are the conversation
id in UTF-8, so every event of a conversation lands in the same partition of its topic.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from deltaguard.events import BillingEvent, Event, FlagEvent, TurnEvent, VerdictEvent, stable_event_id
from deltaguard.kafka.settings import KafkaSettings


def encode_json(obj: Any) -> bytes:
    """Compact JSON bytes; the same function everywhere, so re-encoding is stable."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def encode_key(conversation_id: str) -> bytes:
    return conversation_id.encode("utf-8", "surrogatepass")


def decode_key(key: bytes | None) -> str | None:
    return None if key is None else key.decode("utf-8", "surrogatepass")


def topic_for(event: Event, settings: KafkaSettings) -> str:
    """One topic per event kind (docs/contract.md section 5)."""
    if isinstance(event, TurnEvent):
        return settings.turns_topic
    if isinstance(event, FlagEvent):
        return settings.flags_topic
    if isinstance(event, BillingEvent):
        return settings.billing_topic
    if isinstance(event, VerdictEvent):
        return settings.verdicts_topic
    if isinstance(event, TurnError):
        return settings.errors_topic
    raise TypeError(f"no topic for event type {type(event).__name__}")


@dataclass(frozen=True, slots=True)
class OutboundRecord:
    """One message to publish (also one line of the spool)."""

    topic: str
    key: bytes
    value: bytes
    event_id: str

    @classmethod
    def of(cls, event: Event | TurnError, settings: KafkaSettings) -> OutboundRecord:
        return cls(
            topic=topic_for(event, settings),  # type: ignore[arg-type]
            key=encode_key(event.conversation_id),
            value=encode_json(event.model_dump(mode="json")),
            event_id=event.event_id,
        )


ErrorCode = Literal[
    "previous_response_not_found",  # continuation of a response the table does not hold
    "invalid_turn_event",  # the value is not a TurnEvent
    "invalid_items",  # a TurnEvent whose items do not parse
    "key_mismatch",  # the message key is not the event's conversation id
    "scoring_failed",  # a classifier raised
]


class TurnError(BaseModel):
    """A turn the monitor lane could not score: published to the errors topic.

    A dead-letter record with a reason: `turn` holds the original value (parsed, or the
    raw text when it was not JSON) so an operator can re-publish it once fixed. The id
    is stable (turn event id or offset, and code), so a redelivered failure dedupes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["turn_error"] = "turn_error"
    event_id: str
    code: ErrorCode
    message: str
    conversation_id: str
    response_id: str
    previous_response_id: str | None = None
    turn_event_id: str | None = None
    source: str = Field(description="topic/partition@offset the turn was read from")
    turn: Any = None
    created_at: float = Field(default_factory=time.time)

    @classmethod
    def build(
        cls,
        *,
        code: ErrorCode,
        message: str,
        conversation_id: str,
        response_id: str,
        source: str,
        previous_response_id: str | None = None,
        turn_event_id: str | None = None,
        turn: Any = None,
    ) -> TurnError:
        anchor = turn_event_id or source
        return cls(
            event_id=stable_event_id("turn_error", anchor, code),
            code=code,
            message=message,
            conversation_id=conversation_id,
            response_id=response_id,
            previous_response_id=previous_response_id,
            turn_event_id=turn_event_id,
            source=source,
            turn=turn,
        )
