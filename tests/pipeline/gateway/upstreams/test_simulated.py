"""The simulated Responses model prices its input from the gateway's counts and parses
only the tail of a history it answers: the same answer and usage as parsing it all."""

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
def test_the_gateways_counts_give_the_answer_and_usage_of_a_full_parse(turns, tools):
    items = history(turns)
    counts = [parse_item(i).tokens for i in items]
    parsed = run(SimulatedModel(tokens_per_s=1e9), UpstreamCall({}, items, items, tools=tools))
    counted = UpstreamCall({}, items, items, tools=tools, history_tokens=counts)
    assert run(SimulatedModel(tokens_per_s=1e9), counted) == parsed
    assert parsed[1]["input_tokens"] == sum(counts)


def test_a_long_resent_history_is_not_parsed_again(monkeypatch):
    items = history(40)
    counts = [parse_item(i).tokens for i in items]
    parses = []
    real = simulated.parse_item
    monkeypatch.setattr(simulated, "parse_item", lambda obj, **kw: parses.append(obj) or real(obj, **kw))
    run(SimulatedModel(tokens_per_s=1e9), UpstreamCall({}, items, items, tools=TOOLS, history_tokens=counts))
    assert len(parses) == 5  # the last user message and the calls after it


def test_a_bad_item_in_the_tail_names_its_index():
    items = [*history(1), {"type": "function_call_output", "call_id": 7}]
    from deltaguard.errors import ItemError

    with pytest.raises(ItemError) as exc:
        run(SimulatedModel(tokens_per_s=1e9), UpstreamCall({}, items, items, history_tokens=[1] * len(items)))
    assert exc.value.field.startswith("input[5].")
