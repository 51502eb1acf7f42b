from __future__ import annotations

import doctest

import pytest

import deltaguard.usage
from deltaguard.usage import Usage, usage_from

RESPONSES = {
    "input_tokens": 21,
    "input_tokens_details": {"cached_tokens": 7},
    "output_tokens": 9,
    "output_tokens_details": {"reasoning_tokens": 3},
}
CHAT = {
    "prompt_tokens": 21,
    "prompt_tokens_details": {"cached_tokens": 7},
    "completion_tokens": 9,
    "completion_tokens_details": {"reasoning_tokens": 3},
    "total_tokens": 30,
}


def test_the_module_examples_hold():
    assert doctest.testmod(deltaguard.usage).failed == 0


@pytest.mark.parametrize("usage", [RESPONSES, CHAT])
def test_both_shapes_read_the_same(usage):
    assert usage_from(usage) == Usage(21, 7, 9, 3)


def test_a_known_shape_reads_only_its_own_fields():
    assert usage_from(CHAT, "chat") == usage_from(RESPONSES, "responses") == Usage(21, 7, 9, 3)
    assert usage_from(CHAT, "responses") == Usage(0, 0, 0, 0)
    assert usage_from({"prompt_tokens": 4, "input_tokens": 2}, "chat").input_tokens == 4


@pytest.mark.parametrize("usage", [None, {}, [], "12", {"prompt_tokens": None}])
def test_no_usage_is_zero(usage):
    assert usage_from(usage) == Usage(0, 0, 0, 0)


def test_what_is_not_a_count_counts_zero():
    odd = {
        "input_tokens": -5,
        "input_tokens_details": {"cached_tokens": True},
        "output_tokens": "9",
        "output_tokens_details": {"reasoning_tokens": float("nan")},
    }
    assert usage_from(odd) == Usage(0, 0, 0, 0)
    assert usage_from({"prompt_tokens": 12.0, "prompt_tokens_details": None}) == Usage(12, 0, 0, 0)
