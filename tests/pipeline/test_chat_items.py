"""Chat Completions / Responses wire -> items: canonical, so resent history matches."""

from __future__ import annotations

import copy
import gc
import tracemalloc

import pytest

from deltaguard.chat_items import (
    ItemCache,
    chat_history_items,
    chat_output_items,
    responses_history_items,
    responses_output_items,
)
from deltaguard.errors import ItemError

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
}


def digests(items):
    return [i.digest for i in items]


def test_string_content_and_text_parts_are_the_same_message():
    as_str = chat_history_items([{"role": "user", "content": "line one\nline two"}])
    as_parts = chat_history_items(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "line one"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "line two"},
                ],
            }
        ]
    )
    assert digests(as_str) == digests(as_parts)
    assert as_parts[0].text == "line one\nline two"


def test_roles_tool_calls_and_tool_outputs():
    items = chat_history_items(
        [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "no markdown"},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "12C"}]},
            {"role": "function", "name": "legacy", "content": "old style"},
        ]
    )
    assert [(i.kind, i.role) for i in items] == [
        ("message", "system"),
        ("message", "developer"),
        ("message", "user"),
        ("message", "assistant"),
        ("function_call", "assistant"),
        ("function_call_output", "tool"),
        ("function_call_output", "tool"),
    ]
    assert items[4].text == 'get_weather({"city":"Oslo"})'
    assert items[4].raw["call_id"] == items[5].raw["call_id"] == "call_1"
    assert items[5].text == "12C"


def test_assistant_tool_call_without_text_has_no_empty_message():
    items = chat_history_items([{"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}])
    assert [i.kind for i in items] == ["function_call"]
    # ...but an empty answer without tool calls is kept, so positions never shift
    (empty,) = chat_history_items([{"role": "assistant", "content": ""}])
    assert empty.kind == "message" and empty.text == ""


def test_model_answer_matches_the_clients_echo():
    # What LiteLLM's ModelResponse dumps for choices[0].message ...
    answer = {
        "role": "assistant",
        "content": None,
        "tool_calls": [TOOL_CALL],
        "function_call": None,
        "provider_specific_fields": {"x": 1},
        "annotations": [],
    }
    # ... and what the openai SDK sends back next turn.
    echo = {"role": "assistant", "tool_calls": [TOOL_CALL]}
    assert digests(chat_output_items(answer)) == digests(chat_history_items([echo]))
    text_answer = {"role": "assistant", "content": "Hi!", "refusal": None}
    assert digests(chat_output_items(text_answer)) == digests(
        chat_history_items([{"role": "assistant", "content": [{"type": "text", "text": "Hi!"}]}])
    )


def test_refusal_is_scored_text():
    (item,) = chat_output_items({"role": "assistant", "content": None, "refusal": "I can't help."})
    assert item.text == "I can't help."


def test_unknown_role_is_scored_as_user_text():
    (item,) = chat_history_items([{"role": "narrator", "content": "psst"}])
    assert item.role == "user" and item.text == "psst"


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ("hello", "messages"),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": 7}], "messages[1].content"),
        ([{"role": "user", "content": [{"type": "text", "text": 3}]}], "messages[0].content[0].text"),
        ([{"role": "assistant", "tool_calls": [{"id": 1, "function": {}}]}], "messages[0].tool_calls[0].id"),
        ([{"role": "tool", "tool_call_id": None, "content": 5}], "messages[0].content"),
        (["not a message"], "messages[0]"),
    ],
)
def test_errors_name_the_offending_field(messages, field):
    with pytest.raises(ItemError) as info:
        chat_history_items(messages)
    assert info.value.field == field


def test_conversion_never_mutates_its_input():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "yo", "tool_calls": [TOOL_CALL]},
    ]
    before = copy.deepcopy(messages)
    chat_history_items(messages)
    chat_output_items(messages[1])
    assert messages == before


def test_odd_unicode_survives():
    text = "naïve \u202e\U0001f600 \ud800"  # RTL override, emoji, lone surrogate
    (item,) = chat_history_items([{"role": "user", "content": text}])
    assert item.text == text


def test_responses_input_string_and_instructions():
    items = responses_history_items("hello", instructions="be brief")
    assert [(i.role, i.text) for i in items] == [("system", "be brief"), ("user", "hello")]
    assert digests(responses_history_items("hello")) == digests(
        responses_history_items([{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}])
    )


def test_responses_output_matches_the_clients_echo():
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": [], "status": "completed"},
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done.", "annotations": [], "logprobs": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "status": "completed",
            "call_id": "call_9",
            "name": "f",
            "arguments": "{}",
        },
    ]
    echo = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": "Done."},
        {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{}"},
    ]
    assert digests(responses_output_items(output)) == digests(responses_history_items(echo))


def test_responses_input_errors_name_the_item():
    with pytest.raises(ItemError) as info:
        responses_history_items([{"role": "user", "content": "ok"}, {"type": "function_call", "name": "f"}])
    assert info.value.field.startswith("input[1].")
    with pytest.raises(ItemError):
        responses_history_items(42)


def test_item_cache_returns_what_parsing_gives_and_parses_once():
    cache = ItemCache(max_entries=100)
    messages = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
    ]
    first = chat_history_items(messages, cache=cache)
    assert digests(first) == digests(chat_history_items(messages))
    again = chat_history_items(copy.deepcopy(messages), cache=cache)  # a resent history
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert (cache.hits, cache.misses) == (3, 3)
    # the echo of a model answer hits the item the answer was parsed to
    (answer,) = chat_output_items({"role": "assistant", "content": "Sure."}, cache)
    (echo,) = chat_history_items([{"role": "assistant", "content": "Sure."}], cache=cache)
    assert echo is answer


def test_item_cache_keys_are_exact():
    cache = ItemCache()
    true_item = responses_history_items([{"type": "custom_x", "flag": True}], cache=cache)[0]
    one_item = responses_history_items([{"type": "custom_x", "flag": 1}], cache=cache)[0]
    assert true_item.digest != one_item.digest  # True == 1 in Python, not in JSON
    nested = [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "x"}]}]
    assert responses_history_items(nested, cache=cache)[0] is responses_history_items(nested, cache=cache)[0]
    with pytest.raises(ItemError):
        chat_history_items([{"role": "user", "content": 7}], cache=cache)
    assert len(cache) == 3  # errors are not cached


def test_item_cache_is_bounded():
    cache = ItemCache(max_entries=2)
    for k in range(5):
        chat_history_items([{"role": "user", "content": f"m{k}"}], cache=cache)
    assert len(cache) == 2


def test_item_cache_is_bounded_in_bytes_whatever_its_entry_count():
    cache = ItemCache(max_entries=100_000, max_bytes=1 << 20)
    for k in range(40):  # forty distinct 100 kB messages, and one nested item: 4 MB if all were kept
        chat_history_items([{"role": "user", "content": f"{k:03d}" + "x" * 100_000}], cache=cache)
    nested = [{"type": "custom_x", "data": {"text": "y" * 100_000}}]
    responses_history_items(nested, cache=cache)
    assert 2 <= len(cache) <= 4  # each ~300 kB as counted: its key, its text, its wire form
    last = [{"role": "user", "content": "039" + "x" * 100_000}]
    hits = cache.hits
    chat_history_items(last, cache=cache)
    assert cache.hits == hits + 1  # the most recent are the ones kept
    assert responses_history_items(nested, cache=cache)[0] is responses_history_items(nested, cache=cache)[0]


@pytest.mark.parametrize("n", [2_000, 20_000])
def test_what_the_item_cache_counts_bounds_what_it_holds(n):
    # Short chat messages: counted as their strings alone, a cache held 2.5 times its bound.
    cache = ItemCache(max_entries=10**6, max_bytes=10**12)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            cache.parse({"role": "user", "content": f"please look at issue number {i} in the tracker"})
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.6 * cache._items.bytes <= held <= cache._items.bytes
