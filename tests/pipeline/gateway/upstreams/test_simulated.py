"""The simulated Responses model reads the items the gateway parsed: it parses nothing on
the event loop, with the same answer and usage as parsing the history itself."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deltaguard.gateway.upstreams import simulated
from deltaguard.gateway.upstreams.responses import UpstreamCall
from deltaguard.gateway.upstreams.simulated import SimulatedModel
from deltaguard.parsing import parse_item

TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}]


def history(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for t in range(turns):
        items.append({"role": "user", "content": f"Fix failing test number {t} in the parser module."})
        for c in range(2):
            call_id, name = f"call_{t}_{c}", "read_file"
            items.append({"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"})
            items.append({"type": "function_call_output", "call_id": call_id, "output": f"def f{t}{c}(): ."})
    return items


def run(model: SimulatedModel, call: UpstreamCall) -> tuple[list[str], dict[str, Any]]:
    async def events() -> list[dict[str, Any]]:
        return [e async for e in model.stream(call)]

    done = asyncio.run(events())[-1]["response"]
    said = [o.get("arguments") or o["content"][0]["text"] for o in done["output"]]
    return said, done["usage"]


@pytest.mark.parametrize("turns", [1, 3, 12])
@pytest.mark.parametrize("tools", [TOOLS, None])
def test_the_gateways_items_give_the_answer_and_usage_of_its_own_parse(turns, tools):
    items = history(turns)
    parsed = [parse_item(i, from_client=True) for i in items]
    own = run(SimulatedModel(tokens_per_s=1e9), UpstreamCall({}, items, items, tools=tools))
    given = UpstreamCall({}, items, items, tools=tools, history_items=parsed)
    assert run(SimulatedModel(tokens_per_s=1e9), given) == own
    assert own[1]["input_tokens"] == sum(i.tokens for i in parsed)


def test_a_history_the_gateway_parsed_is_not_parsed_again(monkeypatch):
    items = history(40)
    parsed = [parse_item(i) for i in items]

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("parsed on the event loop")

    monkeypatch.setattr(simulated, "parse_items", refuse)
    said, usage = run(SimulatedModel(tokens_per_s=1e9), UpstreamCall({}, items, items, history_items=parsed))
    assert said and usage["input_tokens"] == sum(i.tokens for i in parsed)
