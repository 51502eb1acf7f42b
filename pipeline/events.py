"""Events DeltaGuard emits to its sinks (and, distributed, to Kafka topics).

Event ids are derived from what the event is about, never random, so a retry or a
replay after a crash produces the same id and consumers can drop duplicates.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

DEFAULT_TENANT = "default"


def stable_event_id(kind: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join((kind, *parts)).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{kind}_{digest[:32]}"


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str
    conversation_id: str
    response_id: str
    created_at: float = Field(default_factory=time.time)
    # Whose conversation (gateway API keys): a flag from a remote worker is enforced, and
    # billing is counted, for this tenant only.
    tenant: str = DEFAULT_TENANT


class FlagEvent(_Event):
    """A conversation crossed a category threshold (docs/contract.md section 5)."""

    kind: Literal["flag"] = "flag"
    lane: Literal["gate", "monitor", "output"]
    decision: Literal["flag", "block"]
    categories: list[str]
    scores: dict[str, float]
    classifier_versions: dict[str, str]
    # Why, when it is not a score crossing a threshold: "repeated_blocks" when a client kept
    # sending blocked turns and the whole conversation is now refused (SafetyStage);
    # "sanitized" when the flagged spans were cut out of untrusted content (policy action
    # `sanitize`, `findings` says where) and the turn went on; "injected_action" when one
    # of the model's actions used strings untrusted content told it to use (lane "output",
    # `findings` names the action and the strings; deltaguard.lanes.provenance).
    reason: Literal["repeated_blocks", "sanitized", "injected_action"] | None = None
    # Where the evidence is, when a classifier locates it: {"item", "start", "end",
    # "category", "score"} per span (docs/contract.md section 6; state/scoring.findings_json).
    findings: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def build(
        cls,
        *,
        conversation_id: str,
        response_id: str,
        lane: Literal["gate", "monitor", "output"],
        decision: Literal["flag", "block"],
        categories: list[str],
        scores: dict[str, float],
        classifier_versions: dict[str, str],
        reason: Literal["repeated_blocks", "sanitized", "injected_action"] | None = None,
        tenant: str = DEFAULT_TENANT,
        findings: list[dict[str, Any]] | None = None,
        subject: str = "",
    ) -> FlagEvent:
        """`subject`: what of the response the flag is about, when a response may raise
        several of one reason (each of its actions): part of the event id."""
        parts = (conversation_id, response_id, lane, ",".join(categories), *((reason,) if reason else ()))
        parts += (subject,) if subject else ()
        return cls(
            event_id=stable_event_id("flag", *parts),
            conversation_id=conversation_id,
            response_id=response_id,
            lane=lane,
            decision=decision,
            categories=categories,
            scores=scores,
            classifier_versions=classifier_versions,
            reason=reason,
            tenant=tenant,
            findings=list(findings or ()),
        )


class BillingEvent(_Event):
    """Usage of one response, emitted after it completed (docs/contract.md section 5)."""

    kind: Literal["billing"] = "billing"
    input_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    classifier_ms: float = Field(ge=0.0)
    reasoning_tokens: int = Field(0, ge=0)  # of output_tokens (the model's usage)
    tokens_scored: int = Field(0, ge=0)  # DeltaGuard's own work for the turn's input

    @classmethod
    def build(
        cls,
        *,
        conversation_id: str,
        response_id: str,
        input_tokens: int,
        cached_input_tokens: int,
        output_tokens: int,
        classifier_ms: float,
        reasoning_tokens: int = 0,
        tokens_scored: int = 0,
        tenant: str = DEFAULT_TENANT,
    ) -> BillingEvent:
        return cls(
            event_id=stable_event_id("billing", response_id),
            conversation_id=conversation_id,
            response_id=response_id,
            input_tokens=input_tokens,
            cached_input_tokens=cached_input_tokens,
            output_tokens=output_tokens,
            classifier_ms=classifier_ms,
            reasoning_tokens=reasoning_tokens,
            tokens_scored=tokens_scored,
            tenant=tenant,
        )


class TurnEvent(_Event):
    """One turn's delta, for monitor-lane workers (distributed mode, topic `deltaguard.turns`).

    `items` are the turn's new input items in wire shape; `full_history` is true when the
    client resent its whole history (stateless HTTP) and `items` is that history.
    `verdict_requested`: a gateway holds the model's actions until the worker's verdict on
    this turn (`VerdictEvent`, topic `deltaguard.verdicts`), whatever it is. Left out of
    the JSON when false, so that the turns nobody holds read as before to older workers.
    """

    kind: Literal["turn"] = "turn"
    previous_response_id: str | None
    items: list[dict[str, Any]]
    full_history: bool = False
    verdict_requested: bool = False

    @model_serializer(mode="wrap")
    def _omit_unrequested(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if not self.verdict_requested:
            data.pop("verdict_requested", None)
        return data

    @classmethod
    def build(
        cls,
        *,
        conversation_id: str,
        response_id: str,
        previous_response_id: str | None,
        items: list[dict[str, Any]],
        full_history: bool = False,
        tenant: str = DEFAULT_TENANT,
        verdict_requested: bool = False,
    ) -> TurnEvent:
        return cls(
            event_id=stable_event_id("turn", response_id),
            conversation_id=conversation_id,
            response_id=response_id,
            previous_response_id=previous_response_id,
            items=items,
            full_history=full_history,
            tenant=tenant,
            verdict_requested=verdict_requested,
        )


class VerdictEvent(_Event):
    """A monitor worker's verdict on one turn that asked for it (`TurnEvent.verdict_requested`),
    benign or not, on topic `deltaguard.verdicts` (docs/contract.md section 5).

    `decision` is the monitor lane's ("allow", "flag", "block"), or "error" when the turn
    could not be scored (`error`: the code of its record on the errors topic). A blocking
    verdict's flag still goes to the flags topic: the verdict releases or blocks the turn
    a gateway holds, the flag blocks the conversation's later turns.
    """

    kind: Literal["verdict"] = "verdict"
    decision: Literal["allow", "flag", "block", "error"]
    categories: list[str] = Field(default_factory=list)
    scores: dict[str, float] = Field(default_factory=dict)
    classifier_versions: dict[str, str] = Field(default_factory=dict)
    findings: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None
    turn_event_id: str

    @classmethod
    def build(
        cls,
        *,
        conversation_id: str,
        response_id: str,
        decision: Literal["allow", "flag", "block", "error"],
        turn_event_id: str,
        categories: list[str] | None = None,
        scores: dict[str, float] | None = None,
        classifier_versions: dict[str, str] | None = None,
        findings: list[dict[str, Any]] | None = None,
        error: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> VerdictEvent:
        return cls(
            event_id=stable_event_id("verdict", response_id, *((error,) if error else ())),
            conversation_id=conversation_id,
            response_id=response_id,
            decision=decision,
            categories=list(categories or ()),
            scores=dict(scores or {}),
            classifier_versions=dict(classifier_versions or {}),
            findings=list(findings or ()),
            error=error,
            turn_event_id=turn_event_id,
            tenant=tenant,
        )


Event = FlagEvent | BillingEvent | TurnEvent | VerdictEvent
