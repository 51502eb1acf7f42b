"""How much a request may hold (`RequestLimits`), and its JSON's shape checked once
before anything walks it.

Every later walk of a request (item parsing, text fields, hashing, scoring, recording)
recurses, so the gateway and the LiteLLM adapter both bound its shape here first, with
the limits in `deltaguard.defaults`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltaguard import defaults


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What one request may hold: its bytes, its JSON's nesting and values, each item's
    bytes, its items and the length of the ids it names (docs/hardening.md). The gateway's
    are its configuration's (`GatewayConfig.request_limits`); the LiteLLM adapter's, these
    defaults."""

    max_request_bytes: int = defaults.MAX_REQUEST_BYTES
    max_json_depth: int = defaults.MAX_JSON_DEPTH
    max_json_values: int = defaults.MAX_JSON_VALUES
    max_item_bytes: int = defaults.MAX_ITEM_BYTES
    max_items_per_request: int = defaults.MAX_ITEMS_PER_REQUEST
    max_id_length: int = defaults.MAX_ID_LENGTH

    def shape_problem(self, obj: Any) -> tuple[str, str] | None:
        """`shape_problem` at these limits.

        >>> RequestLimits(max_json_depth=2).shape_problem({"a": [[1]]})
        ('nesting_too_deep', 'request JSON nests deeper than 2 levels')
        """
        return shape_problem(obj, max_depth=self.max_json_depth, max_values=self.max_json_values)


def shape_problem(obj: Any, *, max_depth: int, max_values: int) -> tuple[str, str] | None:
    """What is wrong with the shape of a request's JSON, as (code, message), or None: nested
    deeper than `max_depth` containers (`nesting_too_deep`), or holding more than
    `max_values` values (`too_many_values`). Every later walk (item parsing, text fields,
    hashing, scoring, recording) recurses, so depth is bounded here, once, without
    recursing; each adapter refuses a request this finds fault with.

    >>> shape_problem({"a": [1, {"b": 2}]}, max_depth=3, max_values=10) is None
    True
    >>> shape_problem({"a": [[1]]}, max_depth=2, max_values=10)
    ('nesting_too_deep', 'request JSON nests deeper than 2 levels')
    """
    stack: list[tuple[Any, int]] = [(obj, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > max_values:
            return "too_many_values", f"request JSON holds more than {max_values} values"
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            return "nesting_too_deep", f"request JSON nests deeper than {max_depth} levels"
        stack.extend((child, depth + 1) for child in children)
    return None
