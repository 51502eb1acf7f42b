"""Faithful pass-through: a client gets through the gateway exactly what it gets from the
model directly (event by event over SSE, JSON and WebSocket), but for ids and the added
`safety` object; billing carries the model's own usage."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from deltaguard.events import BillingEvent
from deltaguard.gateway.config import GatewayConfig
from deltaguard.sinks import MemorySink
from tests.pipeline.gateway.conftest import clients, gateway_thread
from tests.support.reasoning_upstream import (
    custom_tool_call,
    message,
    reasoning,
    running_reasoning_upstream,
    url_citation,
)

TEXT = "Use pathlib for paths, as the Python docs on pathlib recommend."
CITE = url_citation(
    TEXT, "Python docs on pathlib", "https://docs.python.org/3/library/pathlib.html", "pathlib"
)
PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"
TOOLS = [{"type": "custom", "name": "apply_patch", "description": "Edit files with a patch."}]
# Every request field a client may set, so that the echo of each one is checked too.
REQUEST = {
    "model": "gpt-test",
    "tools": TOOLS,
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "low", "summary": "auto"},
    "text": {"verbosity": "low"},
    "service_tier": "auto",
    "prompt_cache_key": "session-1",
    "max_output_tokens": 4000,
    "user": "user-1",
    "safety_identifier": "sid-1",
    "metadata": {"task": "fidelity"},
    "parallel_tool_calls": True,
    "store": False,
}


def policy(history: list[dict[str, Any]], body: dict[str, Any]) -> list[dict[str, Any]]:
    """A reasoning model: reasoning with a summary, a freeform patch, then a cited answer."""
    if not any(i.get("type") == "custom_tool_call_output" for i in history):
        return [
            reasoning("The fix is a one-line patch.", "I apply it."),
            custom_tool_call("apply_patch", PATCH),
        ]
    return [reasoning("The patch applied; I summarise."), message(TEXT, [CITE])]


# Ids differ between two runs (and encrypted content is bound to its item's id), as do
# timestamps; nothing else may.
_VOLATILE = {
    "id",
    "item_id",
    "call_id",
    "encrypted_content",
    "created_at",
    "completed_at",
    "previous_response_id",
}


def normalised(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: ("<volatile>" if k in _VOLATILE else normalised(v)) for k, v in obj.items() if k != "safety"
        }
    if isinstance(obj, list):
        return [normalised(v) for v in obj]
    if isinstance(obj, str):
        return re.sub(r"\b(resp|rs|msg|ctc|call|fc)_[0-9a-f]{8,}", "<id>", obj)
    return obj


def sse_events(client) -> list[dict[str, Any]]:
    stream = client.responses.create(input="fix a.py", stream=True, **REQUEST)
    return [e.model_dump(mode="json", exclude_unset=True) for e in stream]


def test_sse_json_and_every_event_are_forwarded_as_the_model_sent_them(scorer):
    billing = MemorySink()
    with (
        running_reasoning_upstream(policy=policy) as (direct_base, _),
        running_reasoning_upstream(policy=policy) as (upstream, _),
        gateway_thread(GatewayConfig(port=0, upstream=upstream), scorer, billing_sink=billing) as (base, _),
    ):
        direct, _ = clients(direct_base.removesuffix("/v1"))
        through, _ = clients(base)
        expected, got = sse_events(direct), sse_events(through)
        kinds = [e["type"] for e in got]
        assert "response.reasoning_summary_text.delta" in kinds
        assert "response.custom_tool_call_input.delta" in kinds
        assert [e["type"] for e in expected] == kinds
        for want, have in zip(expected, got, strict=True):
            assert normalised(have) == normalised(want), have["type"]
        final = got[-1]["response"]
        assert final["safety"]["decision"] == "allow"
        # JSON: the same response object (its usage aside: the upstream's prompt cache now
        # holds this prompt, as it would for a client calling it directly twice).
        plain = through.responses.create(input="fix a.py", **REQUEST).model_dump(
            mode="json", exclude_unset=True
        )
        assert normalised({**plain, "usage": None}) == normalised({**expected[-1]["response"], "usage": None})
        usage = final["usage"]
        assert usage["output_tokens_details"]["reasoning_tokens"] > 0
    events = [e for e in billing.unique() if isinstance(e, BillingEvent)]
    mine = next(e for e in events if e.response_id == final["id"])
    assert (mine.input_tokens, mine.cached_input_tokens, mine.output_tokens, mine.reasoning_tokens) == (
        usage["input_tokens"],
        usage["input_tokens_details"]["cached_tokens"],
        usage["output_tokens"],
        usage["output_tokens_details"]["reasoning_tokens"],
    )
    assert mine.tokens_scored == final["safety"]["tokens_scored"]


async def ws_turns(aclient) -> list[list[dict[str, Any]]]:
    """Two turns on one socket: the patch, then its output with previous_response_id."""
    turns = []
    async with aclient.beta.responses.connect() as conn:
        await conn.send({"type": "response.create", "input": "fix a.py", **REQUEST})
        events = []
        async for event in conn:
            events.append(event.model_dump(mode="json", exclude_unset=True))
            if event.type in ("response.completed", "error"):
                break
        turns.append(events)
        final = events[-1]["response"]
        call = next(o for o in final["output"] if o["type"] == "custom_tool_call")
        follow = [{"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Success."}]
        await conn.send(
            {"type": "response.create", "input": follow, "previous_response_id": final["id"], **REQUEST}
        )
        events = []
        async for event in conn:
            events.append(event.model_dump(mode="json", exclude_unset=True))
            if event.type in ("response.completed", "error"):
                break
        turns.append(events)
    return turns


@pytest.mark.parametrize("mode", ["auto", "http"])
def test_websocket_turns_are_forwarded_as_the_model_sent_them(scorer, mode):
    with (
        running_reasoning_upstream(policy=policy) as (direct_base, _),
        running_reasoning_upstream(policy=policy) as (upstream, recorder),
        gateway_thread(GatewayConfig(port=0, upstream=upstream, upstream_mode=mode), scorer) as (base, _),
    ):
        _, direct = clients(direct_base.removesuffix("/v1"))
        _, through = clients(base)
        expected, got = asyncio.run(ws_turns(direct)), asyncio.run(ws_turns(through))
        for want_turn, have_turn in zip(expected, got, strict=True):
            assert [e["type"] for e in have_turn] == [e["type"] for e in want_turn]
            for want, have in zip(want_turn, have_turn, strict=True):
                if have["type"] == "response.completed" and mode == "http":
                    # Over HTTP the model reads the whole history again: only its usage differs.
                    have, want = ({**e, "response": {**e["response"], "usage": None}} for e in (have, want))
                assert normalised(have) == normalised(want), have["type"]
        # The model got its own reasoning back, unchanged, whichever way it was reached.
        assert recorder.reasoning_round_tripped()
        transports = {r.transport for r in recorder.requests}
        assert transports == ({"ws"} if mode == "auto" else {"sse"})
        if mode == "auto":  # the continuation carried only its new item
            assert [r.input_items for r in recorder.requests] == [1, 1]


def test_a_closed_upstream_socket_is_reopened_with_the_whole_history(scorer):
    """The upstream closes every socket after one turn (a lifetime limit): the gateway's
    pooled connection is gone, so the next turn opens a new one and resends everything."""
    with (
        running_reasoning_upstream(policy=policy, ws_turns_per_connection=1) as (upstream, recorder),
        gateway_thread(GatewayConfig(port=0, upstream=upstream), scorer) as (base, _),
    ):
        _, through = clients(base)
        _, second = asyncio.run(ws_turns(through))
        assert [e["type"] for e in second][-1] == "response.completed"
        assert [(r.transport, r.previous_response_id is None) for r in recorder.requests] == [
            ("ws", True),
            ("ws", True),
        ]
        # The whole history: the task, the reasoning and patch call of turn 1, and the output.
        assert recorder.requests[1].input_items == 4
        assert recorder.reasoning_round_tripped()
