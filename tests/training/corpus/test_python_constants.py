"""Constants read from a Python source without running it (training/corpus/python_constants.py)."""

import ast

import pytest

from training.corpus.python_constants import Unknown, assigned, evaluate

SOURCE = """
CANARY = "OK-7F"
NAME: str = "agent"
PAYLOADS = [{"prompt": "say '" + CANARY + "'", "lang": "en"}, {"prompt": f"hi {NAME}" + "!" * 3}]
CALLED = sorted(PAYLOADS)
AMOUNT = 100 * 1.2
"""


def test_constants_concatenations_and_f_strings_over_earlier_names_are_evaluated():
    names = assigned(ast.parse(SOURCE).body, {})
    assert names["PAYLOADS"] == [{"prompt": "say 'OK-7F'", "lang": "en"}, {"prompt": "hi agent!!!"}]


def test_calls_and_arithmetic_are_not_evaluated_and_their_names_stay_unbound():
    names = assigned(ast.parse(SOURCE).body, {})
    assert "CALLED" not in names
    assert "AMOUNT" not in names  # arithmetic is left alone: only a string times a count
    with pytest.raises(Unknown):
        evaluate(ast.parse("open('x')", mode="eval").body, {})
