"""The Responses protocol: what the gateway asks of a Responses-API model.

An upstream is `stream(call)`, an async iterator of Responses API stream events exactly
as the model produced them (dicts: `response.created`, ..., `response.completed`), plus
`aclose()`. The gateway forwards them to its client unchanged but for the response id,
so everything the model sends (reasoning items and their encrypted content, freeform
tool calls, annotations, usage) reaches the client.

`UpstreamCall` carries both views of the turn's input: the whole history, and only the
items after the upstream response it continues (`parent`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from deltaguard.items import Item

# Events that end a response on the stream.
TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One turn for the model.

    `body`: the request fields to forward as the client sent them (model, tools,
    reasoning, text, include, ...; never input or state references). `history`: every
    input item of the conversation, oldest first (wire shapes). `new_items`: the suffix
    of `history` after `parent`, the upstream's id of the response this turn continues
    (None when unknown: then only a full resend works). `conversation` pins a persistent
    connection; `generate=False` primes the upstream's state without generating.
    """

    body: dict[str, Any]
    history: Sequence[dict[str, Any]]
    new_items: Sequence[dict[str, Any]]
    parent: str | None = None
    conversation: str = ""
    generate: bool = True
    tools: list[dict[str, Any]] | None = None  # in effect (inherited when not resent); informational
    # `history` as the gateway parsed it, item for item (None: not parsed), for an upstream
    # that reads items without parsing them again (the simulated model).
    history_items: Sequence[Item] | None = None


class Upstream(Protocol):
    """A Responses-API model: a turn's stream events as the model sent them."""

    def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]: ...

    async def aclose(self) -> None: ...
