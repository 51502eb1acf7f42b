import doctest

import deltaguard.bounds
from deltaguard.bounds import shape_problem


def test_doctests():
    assert doctest.testmod(deltaguard.bounds).failed == 0


def test_depth_and_values_are_bounded_without_recursing():
    deep: list = []
    for _ in range(100_000):  # far past Python's recursion limit
        deep = [deep]
    assert shape_problem(deep, max_depth=64, max_values=1_000_000) == (
        "nesting_too_deep",
        "request JSON nests deeper than 64 levels",
    )
    assert shape_problem({"a": list(range(20))}, max_depth=8, max_values=10) == (
        "too_many_values",
        "request JSON holds more than 10 values",
    )
    assert shape_problem({"a": [1, {"b": "c"}]}, max_depth=3, max_values=5) is None
