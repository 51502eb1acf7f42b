from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaguard.errors import ItemError
from deltaguard.items import count_tokens
from deltaguard.parsing import parse_item, parse_items
from tests.support.gil import ticks_during


def test_message_content_shapes_share_text_and_digest_of_type():
    plain = parse_item({"type": "message", "role": "user", "content": "hello"})
    untyped = parse_item({"role": "user", "content": "hello"})
    parts = parse_item(
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "hel"}, {"type": "input_text", "text": "lo"}],
        }
    )
    assert plain.text == untyped.text == "hello"
    assert parts.text == "hel\nlo"
    assert plain.digest == untyped.digest  # "type" omitted is the same item
    assert parts.digest != plain.digest  # "hel\nlo" is not "hello"
    one_part = parse_item({"role": "user", "content": [{"type": "input_text", "text": "hello"}]})
    assert one_part.digest == plain.digest  # same text, same history
    with_ids = parse_item({"id": "msg_1", "status": "completed", "role": "user", "content": "hello"})
    assert with_ids.digest == plain.digest
    assert parse_item({"role": "assistant", "content": "hello"}).digest != plain.digest


def test_function_call_and_output_views():
    call = parse_item(
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path": "a.py"}'}
    )
    out = parse_item({"type": "function_call_output", "call_id": "c1", "output": "print('hi')"})
    assert call.text == 'read_file({"path": "a.py"})' and call.role == "assistant"
    assert out.text == "print('hi')" and out.role == "tool"
    assert call.scored and out.scored


def test_image_parts_are_ignored_in_text():
    item = parse_item(
        {
            "role": "user",
            "content": [{"type": "input_image", "image_url": "x"}, {"type": "input_text", "text": "hi"}],
        }
    )
    assert item.text == "hi"


def test_unknown_types_are_kept_unscored():
    item = parse_item({"type": "reasoning", "id": "rs_1", "summary": []})
    assert item.kind == "reasoning" and not item.scored and item.text == ""
    weird = parse_item({"type": "totally_new_thing", "payload": [1, 2]})
    assert not weird.scored and weird.raw["payload"] == [1, 2]


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"role": "robot", "content": "hi"}, "role"),
        ({"role": "user", "content": 3}, "content"),
        ({"role": "user"}, "content"),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}, "arguments"),
        ({"type": "function_call_output", "output": "x"}, "call_id"),
        ({"type": 7}, "type"),
        ({"type": ""}, "type"),
        ("just a string", "item"),
    ],
)
def test_wrong_shapes_name_the_field(obj, field):
    with pytest.raises(ItemError) as exc:
        parse_item(obj)
    assert exc.value.field.startswith(field)


def test_list_errors_name_the_index():
    with pytest.raises(ItemError) as exc:
        parse_items([{"role": "user", "content": "ok"}, {"role": "user", "content": None}])
    assert exc.value.field.startswith("input[1].content")


def test_an_item_echoed_back_with_null_fields_is_the_same_history():
    produced = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]}
    produced["encrypted_content"] = "opaque"
    echoed = {**produced, "content": None, "status": "completed"}  # as Codex resends it
    assert parse_item(produced).digest == parse_item(echoed).digest
    assert parse_item({**produced, "encrypted_content": "other"}).digest != parse_item(produced).digest


def test_a_long_text_counts_as_one_regex_over_it_would():
    rng = random.Random(3)
    alphabet = "ab c.,!\n\t é東😀_-"
    for n in (40_000, 100_000, 250_000):
        text = "".join(rng.choice(alphabet) for _ in range(n))
        assert count_tokens(text) == len(re.findall(r"\w+|[^\w\s]", text))
    assert count_tokens("x" * 100_000) == 1  # no whitespace: one slice, one word
    ascii_text = "".join(rng.choice("ab c.,!\n\t_-\x1c") for _ in range(100_000))
    assert count_tokens(ascii_text) == len(re.findall(r"\w+|[^\w\s]", ascii_text))


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=0x7F)) | st.text())
def test_tokens_are_counted_as_the_pattern_counts_them(text):
    """ASCII text is counted by byte counts, any other by the pattern: the same counts."""
    assert count_tokens(text) == len(re.findall(r"\w+|[^\w\s]", text))


def test_a_long_text_is_counted_while_other_threads_run():
    # One regex over a 4 MB text held the GIL for all of it, freezing the event loop. (Not
    # ASCII: ASCII text is counted by byte counts, a 4 MB text in a few milliseconds.)
    text = "lorem ipsum, dolor sit amét. " * 140_000
    count, ticks = ticks_during(count_tokens, text)
    assert count == 140_000 * 7
    assert ticks >= 3, f"another thread ran {ticks} times while the text was counted"
