"""A LiteLLM answer read as DeltaGuard items and billed usage (framework-free).

Chat Completions and Responses answers, as dicts or as the pydantic objects LiteLLM
returns, become the items the post-call lane scores and the `Usage` a billing event
carries; usage is read by `deltaguard.usage`, like every other route's.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

from deltaguard.chat_items import ItemCache, chat_output_items, responses_output_items
from deltaguard.items import Item
from deltaguard.usage import Shape, Usage, usage_from


def body_of(obj: Any) -> dict[str, Any] | None:
    """A response object (a mapping, or a pydantic model LiteLLM returns) as a dict."""
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if dump is None:
        return None
    with contextlib.suppress(Exception):
        out = dump()
        return out if isinstance(out, dict) else None
    return None


def billed_usage(usage: Any, shape: Shape) -> Usage:
    """The usage a LiteLLM turn is billed with: the upstream's, without reasoning tokens."""
    # Turns through LiteLLM have been billed without their reasoning tokens; counting
    # them, as the gateway does, would change what these billing events say.
    return dataclasses.replace(usage_from(usage, shape), reasoning_tokens=0)


def answer_of(response: Any, cache: ItemCache | None = None) -> tuple[list[Item], Usage, str | None] | None:
    """The items, usage and id of a chat or Responses answer; None for other shapes."""
    body = body_of(response)
    if body is None:
        return None
    usage = body.get("usage") or {}
    if isinstance(body.get("choices"), list):
        if not body["choices"]:
            return [], Usage(0, 0, 0), None
        message = (body_of(body["choices"][0]) or {}).get("message")
        message = body_of(message) or {}
        return (
            chat_output_items(message, cache),
            billed_usage(usage, "chat"),
            None,
        )
    if isinstance(body.get("output"), list):
        output = [body_of(o) or o for o in body["output"]]
        return (
            responses_output_items(output, cache),
            billed_usage(usage, "responses"),
            body.get("id") if isinstance(body.get("id"), str) else None,
        )
    return None
