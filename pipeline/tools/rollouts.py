"""Synthetic agent rollouts: a coding agent reading files and running tests.

Deterministic for a seed. Each turn after the first sends the model's previous tool
call's output (a file or a test log of about `tool_tokens` tokens) as its new input,
the way agent loops do; the model's output is the next tool call.
"""

from __future__ import annotations

import json
import random
from typing import Any

_IDENTS = [
    "config",
    "parser",
    "request",
    "handler",
    "session",
    "cache",
    "buffer",
    "token",
    "user",
    "item",
    "order",
    "invoice",
    "retry",
    "client",
]
_WORDS = [
    "the",
    "value",
    "is",
    "not",
    "None",
    "when",
    "we",
    "return",
    "early",
    "from",
    "this",
    "branch",
    "and",
    "then",
    "retry",
    "after",
    "a",
    "short",
    "delay",
]


def _code_line(rng: random.Random) -> str:
    a, b, c = rng.sample(_IDENTS, 3)
    shape = rng.randrange(5)
    if shape == 0:
        return f"    def {a}_{b}(self, {c}: int) -> bool:"
    if shape == 1:
        return f"        {a} = self.{b}.get({c!r}, {rng.randrange(100)})"
    if shape == 2:
        return f"        # {' '.join(rng.sample(_WORDS, 8))}"
    if shape == 3:
        return f"        if {a} is None or {b} > {rng.randrange(1000)}: return {c}"
    return f"tests/test_{a}.py::test_{b}_{c} PASSED [{rng.randrange(100)}%]"


def tool_output(rng: random.Random, tokens: int) -> str:
    """Code or log text of about `tokens` tokens (as `count_tokens` counts them)."""
    lines: list[str] = []
    n = 0
    while n < tokens:
        line = _code_line(rng)
        lines.append(line)
        n += max(1, len(line) // 4)
    return "\n".join(lines)


def agent_rollout(conv_id: str, turns: int, tool_tokens: int = 1000, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    out_turns = []
    for t in range(turns):
        call = {
            "type": "function_call",
            "call_id": f"call_{t}",
            "name": rng.choice(["read_file", "run_tests", "grep"]),
            "arguments": json.dumps({"path": f"src/{rng.choice(_IDENTS)}.py"}),
        }
        if t == 0:
            inputs = [
                {
                    "role": "system",
                    "content": "You are a coding agent. Use the tools to fix the failing test.",
                },
                {
                    "role": "user",
                    "content": "The test test_retry_after_timeout fails on main. Please fix it.",
                },
            ]
        else:
            inputs = [
                {
                    "type": "function_call_output",
                    "call_id": f"call_{t - 1}",
                    "output": tool_output(rng, tool_tokens),
                }
            ]
        out_turns.append({"input": inputs, "output": [call]})
    return {"id": conv_id, "turns": out_turns}
