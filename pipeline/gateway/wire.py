"""Responses API wire shapes: request parsing, response objects, streaming events.

Only what the safety stage needs is validated strictly (input items, ids, sizes); the
other request fields are passed through to the upstream model unchanged.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from deltaguard.bounds import RequestLimits
from deltaguard.errors import ItemError
from deltaguard.gateway.http_errors import RequestError, invalid_item
from deltaguard.items import Item
from deltaguard.parsing import parse_items

log = logging.getLogger("deltaguard.gateway")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass
class CreateRequest:
    """A parsed `response.create` / `POST /v1/responses` body."""

    model: str
    items: list[Item]
    previous_response_id: str | None
    stream: bool
    tools: list[dict[str, Any]] | None
    instructions: str | None
    body: dict[str, Any] = field(repr=False)
    conversation: str | None = None  # the Conversations API id this turn continues
    generate: bool = True  # false: prime the state with the input, generate nothing
    # The id the gateway gives the response, named as the request is read.
    response_id: str = field(default_factory=lambda: new_id("resp"))
    # The request fields forwarded to the model as the client sent them: all but the input
    # and the state references, which the gateway resolves itself.
    upstream_body: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        skip = ("input", "previous_response_id", "conversation", "stream", "type", "generate")
        self.upstream_body = {k: v for k, v in self.body.items() if k not in skip}


def parse_body(raw: bytes | str, limits: RequestLimits) -> dict[str, Any]:
    """A request body as a JSON object, its size and structure checked against `limits`
    before anything reads it (`check_structure`); a refusal is logged once, as one line."""
    try:
        if len(raw) > limits.max_request_bytes:
            raise RequestError(
                f"request is {len(raw)} bytes; the limit is {limits.max_request_bytes}",
                code="request_too_large",
                status=413,
            )
        try:
            obj = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise RequestError(f"request body is not valid JSON: {exc}", code="invalid_json") from None
        except RecursionError:
            raise RequestError("request body is nested too deeply", code="invalid_json") from None
        if not isinstance(obj, dict):
            raise RequestError(
                f"request body must be a JSON object, got {type(obj).__name__}", code="invalid_request"
            )
        check_structure(obj, limits)
    except RequestError as err:
        log.warning("request refused: %s %s: %s", err.status, err.code, err.message[:200])
        raise
    return obj


def check_structure(obj: Any, limits: RequestLimits) -> None:
    """Refuse JSON nested too deep or holding too many values (`bounds.shape_problem`):
    400 `nesting_too_deep`, 413 `too_many_values`.

    >>> check_structure({"a": [[1]]}, RequestLimits(max_json_depth=2))
    Traceback (most recent call last):
    deltaguard.gateway.http_errors.RequestError: request JSON nests deeper than 2 levels
    """
    problem = limits.shape_problem(obj)
    if problem is not None:
        code, message = problem
        raise RequestError(message, code=code, status=413 if code == "too_many_values" else 400)


def check_sizes(entries: list[Any], field: str, limits: RequestLimits) -> None:
    """The request limits on a list of items or messages: how many, and each one's size."""
    if len(entries) > limits.max_items_per_request:
        raise RequestError(
            f"{field} has {len(entries)} entries; the limit is {limits.max_items_per_request}",
            code="too_many_items",
            param=field,
        )
    for i, entry in enumerate(entries):
        size = len(entry) if isinstance(entry, str) else len(json.dumps(entry, ensure_ascii=False))
        if size > limits.max_item_bytes:
            raise RequestError(
                f"{field}[{i}] is {size} bytes; the limit is {limits.max_item_bytes}",
                code="item_too_large",
                param=f"{field}[{i}]",
                status=413,
            )


def optional_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise RequestError("tools must be a list of objects", code="invalid_type", param="tools")
    return tools


def optional_instructions(body: dict[str, Any]) -> str | None:
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("instructions must be a string", code="invalid_type", param="instructions")
    return instructions


def _id_field(body: dict[str, Any], name: str, max_len: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise RequestError(f"{name} must be a non-empty string", code="invalid_type", param=name)
    if len(value) > max_len:
        raise RequestError(f"{name} is longer than {max_len} characters", code="invalid_value", param=name)
    return value


def read_create(raw: bytes | str, limits: RequestLimits, *, frame: bool = False) -> CreateRequest:
    """A `response.create` request from its bytes, checked against `limits`: an HTTP body,
    or (`frame`) a WebSocket frame, whose `type` must say so."""
    body = parse_body(raw, limits)
    if frame:
        kind = body.get("type")
        if kind != "response.create":
            raise RequestError(
                f"unknown event type {kind!r}; expected 'response.create'", code="unknown_event", param="type"
            )
        body = {k: v for k, v in body.items() if k not in ("type", "stream")}
    return parse_create(body, limits)


def parse_create(body: dict[str, Any], limits: RequestLimits) -> CreateRequest:
    model = body.get("model", "deltaguard-sim")
    if not isinstance(model, str):
        raise RequestError("model must be a string", code="invalid_type", param="model")
    raw_input = body.get("input")
    if raw_input is None:
        raise RequestError("input is required", code="missing_required_parameter", param="input")
    if isinstance(raw_input, str):
        # The item the Responses API itself makes of a string input.
        raw_input = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": raw_input}]}
        ]
    if not isinstance(raw_input, list):
        raise RequestError("input must be a string or a list of items", code="invalid_type", param="input")
    check_sizes(raw_input, "input", limits)
    try:
        items = parse_items(raw_input, "input", from_client=True)
    except ItemError as exc:
        raise invalid_item(exc) from None
    tools = optional_tools(body)
    instructions = optional_instructions(body)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", code="invalid_type", param="stream")
    generate = body.get("generate", True)
    if not isinstance(generate, bool):
        raise RequestError("generate must be a boolean", code="invalid_type", param="generate")
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if conversation is not None:
        conversation = _id_field({"conversation": conversation}, "conversation", limits.max_id_length)
        if body.get("previous_response_id") is not None:
            raise RequestError(
                "previous_response_id and conversation cannot be used together",
                code="invalid_request",
                param="conversation",
            )
    return CreateRequest(
        model=model,
        items=items,
        previous_response_id=_id_field(body, "previous_response_id", limits.max_id_length),
        stream=stream,
        tools=tools,
        instructions=instructions,
        body=body,
        conversation=conversation,
        generate=generate,
    )


def response_object(
    response_id: str,
    req: CreateRequest | dict[str, Any],
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    created_at: int | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A response object as the hosted API builds it, echoing the request (`req`: a
    parsed request, or the body a model was sent)."""
    if isinstance(req, CreateRequest):
        body = {**req.body, "model": req.model, "tools": req.tools, "instructions": req.instructions}
    else:
        body = req
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at or int(time.time()),
        "status": status,
        "model": body.get("model", "deltaguard-sim"),
        "output": output,
        "previous_response_id": body.get("previous_response_id"),
        "instructions": body.get("instructions"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "metadata": body.get("metadata") or {},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "incomplete_details": None,
        "error": error,
        "usage": usage,
    }
