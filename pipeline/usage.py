"""A response's token usage, read from whichever shape the upstream reported it in.

The Responses API reports `input_tokens`, `output_tokens` and their `*_details`; Chat
Completions (and the providers that copy it) report `prompt_tokens`,
`completion_tokens` and theirs. Every adapter (the Responses, chat and guard endpoints,
LiteLLM) bills a turn with the `Usage` that `usage_from` reads, so that a count means
the same whichever route it came by; `usage_object` writes a `Usage` back in either shape
(the simulated upstreams report their usage with it).

>>> usage_from({"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}})
Usage(input_tokens=12, cached_input_tokens=4, output_tokens=3, reasoning_tokens=0)
>>> usage_from({"input_tokens": 5, "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 1}})
Usage(input_tokens=5, cached_input_tokens=0, output_tokens=1, reasoning_tokens=1)
>>> usage_from(None)
Usage(input_tokens=0, cached_input_tokens=0, output_tokens=0, reasoning_tokens=0)
>>> usage_from(usage_object(Usage(7, 2, 3), "chat")) == Usage(7, 2, 3)
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Shape = Literal["responses", "chat"]

# The most tokens one response can be billed for: far beyond any model's context, far
# below what overflows a billing system's integers.
MAX_TOKENS = 10**9

# (input, its details, output, its details) in each shape.
_FIELDS: dict[Shape, tuple[str, str, str, str]] = {
    "responses": ("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details"),
    "chat": ("prompt_tokens", "prompt_tokens_details", "completion_tokens", "completion_tokens_details"),
}


@dataclass(frozen=True, slots=True)
class Usage:
    """The model's usage of one response, as the upstream reported it."""

    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int = 0


def usage_from(usage: Any, shape: Shape | None = None) -> Usage:
    """`usage` (a mapping) in the Responses or the Chat Completions shape; zeros for what
    it lacks or does not count (no usage at all, a negative or non-numeric value).

    `shape`: when the caller knows it from the response; otherwise the Responses shape
    when `input_tokens` or `output_tokens` is there, else the chat shape."""
    if not isinstance(usage, Mapping):
        usage = {}
    if shape is None:
        shape = "responses" if "input_tokens" in usage or "output_tokens" in usage else "chat"
    tokens_in, details_in, tokens_out, details_out = _FIELDS[shape]
    return Usage(
        _count(usage.get(tokens_in)),
        _count(_detail(usage, details_in, "cached_tokens")),
        _count(usage.get(tokens_out)),
        _count(_detail(usage, details_out, "reasoning_tokens")),
    )


def usage_object(usage: Usage, shape: Shape = "responses") -> dict[str, Any]:
    """`usage` as the Responses API (`shape="responses"`) or Chat Completions reports it,
    `total_tokens` included: what `usage_from` reads back."""
    tokens_in, details_in, tokens_out, details_out = _FIELDS[shape]
    counts = {tokens_in: usage.input_tokens, tokens_out: usage.output_tokens}
    details = {
        details_in: {"cached_tokens": usage.cached_input_tokens},
        details_out: {"reasoning_tokens": usage.reasoning_tokens},
    }
    total = {"total_tokens": usage.input_tokens + usage.output_tokens}
    if shape == "chat":  # each API's own field order
        return {**counts, **total, **details}
    return {
        tokens_in: usage.input_tokens,
        details_in: details[details_in],
        tokens_out: usage.output_tokens,
        details_out: details[details_out],
        **total,
    }


def usage_problem(usage: Any) -> str | None:
    """Why a client-supplied `usage` cannot be billed (its first bad count), else None.

    Every count either shape names (and `total_tokens`, and the details' counts) must be
    a whole number in [0, MAX_TOKENS] where present: a client's figure is billed as
    given, so a negative, fractional, textual or absurd one is refused, never clamped.

    >>> usage_problem({"input_tokens": 3, "output_tokens": -1})
    'usage.output_tokens must be a whole number from 0 to 1000000000, got -1'
    >>> usage_problem({"prompt_tokens": 3, "completion_tokens": 2}) is None
    True
    """
    if not isinstance(usage, Mapping):
        return f"usage must be an object, got {type(usage).__name__}"
    names = [(name, usage) for fields in _FIELDS.values() for name in (fields[0], fields[2])]
    names.append(("total_tokens", usage))
    for fields in _FIELDS.values():
        for details, count in ((fields[1], "cached_tokens"), (fields[3], "reasoning_tokens")):
            inner = usage.get(details)
            if inner is not None and not isinstance(inner, Mapping):
                return f"usage.{details} must be an object"
            if isinstance(inner, Mapping):
                names.append((f"{details}.{count}", inner))
    for name, where in names:
        value = where.get(name.rpartition(".")[2])
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
            shown = repr(value)[:40]
            return f"usage.{name} must be a whole number from 0 to {MAX_TOKENS}, got {shown}"
    return None


def _detail(usage: Mapping[str, Any], details: str, name: str) -> Any:
    inner = usage.get(details)
    return inner.get(name) if isinstance(inner, Mapping) else None


def _count(value: Any) -> int:
    """A token count: a whole number, at least 0; anything else counts 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and math.isfinite(value):
        return max(int(value), 0)
    return 0
