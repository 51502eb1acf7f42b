"""The simulated models write like a coding agent: files read, what was found, a close;
deterministic, exactly as many words as asked for, through both protocols of the gateway."""

from __future__ import annotations

import json
import random
import re

import pytest

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.upstreams.agent_text import _CLOSERS, PATHS, reply
from tests.pipeline.gateway.conftest import clients, gateway_thread

TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
SENTENCE = re.compile(r"[A-Z].*?[.?](?= |$)")


def sentences(text: str) -> list[str]:
    found = SENTENCE.findall(text)
    assert " ".join(found) == text, text  # nothing but whole sentences
    return found


@pytest.mark.parametrize("asked", ["The test fails. Fix the bug.", "Summarise the README.", "hello!"])
def test_every_length_is_met_exactly_in_whole_sentences(asked):
    assert sorted(_CLOSERS) == list(range(1, 13))
    for words in range(1, 160):
        text = reply(random.Random(words), words, asked, ["src/retry.py"] if words % 2 else [])
        assert len(text.split(" ")) == words and sentences(text)
    long = sentences(reply(random.Random(0), 60, asked))
    assert len(set(long)) == len(long)  # nothing said twice in an ordinary answer


def run_agent(base: str) -> tuple[list[str], str]:
    client, _ = clients(base)
    task = "The test test_retry fails. Find and fix the bug."
    r = client.responses.create(model="sim", input=task, tools=TOOLS)
    paths = []
    while any(o.type == "function_call" for o in r.output):
        (call,) = [o for o in r.output if o.type == "function_call"]
        paths.append(json.loads(call.arguments)["path"])
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "def retry(): ..."}
        r = client.responses.create(model="sim", input=[output], previous_response_id=r.id, tools=TOOLS)
    assert r.safety["decision"] == "allow" and not r.safety["flagged_categories"]
    return paths, r.output_text


def test_the_responses_model_reads_files_then_sums_up(scorer):
    config = GatewayConfig(port=0, sim_tokens_per_s=100_000, sim_tool_calls=2)
    with gateway_thread(config, scorer) as (base, _):
        paths, text = run_agent(base)
        again = run_agent(base)
    assert len(paths) == 2 and set(paths) <= set(PATHS)
    assert text.startswith(f"I read {paths[0]} and {paths[1]}.") and len(text.split(" ")) == 40
    # The same task reads the same files (the answers differ only as far as the histories
    # do: each call gets a fresh id, as a real model's does).
    assert again[0] == paths and again[1].startswith(f"I read {paths[0]} and {paths[1]}.")


def test_the_chat_model_answers_the_same_way(scorer):
    with gateway_thread(GatewayConfig(port=0, sim_tokens_per_s=100_000), scorer) as (base, _):
        client, _ = clients(base)
        ask = [{"role": "user", "content": "Summarise the install steps of the README."}]
        r = client.chat.completions.create(model="sim", messages=ask)
        again = client.chat.completions.create(model="sim", messages=ask)
    text = r.choices[0].message.content
    assert again.choices[0].message.content == text  # a function of the messages
    assert text.startswith("Here is a summary.") and len(sentences(text)) >= 3
    assert r.usage.completion_tokens == len(text.split(" ")) == 40
