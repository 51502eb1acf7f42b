"""agentprobe's injection carriers (agentprobe-injection==0.2.0a1,
`agentprobe/injection/carriers.py`): the places an instruction sits in the data an agent
reads, an e-mail's footer, signature, quoted thread or HTML comment, a document's
footnote, header or table cell, a web page's alt text, meta tag or comment.

Each carrier is a `Carrier(name, channel, rationale, lambda p: ...)` whose lambda fills
one slot. Read from the syntax tree, never imported (training/corpus/python_constants.py):
a carrier whose body calls a function (the Russian one translates its few canary
instructions only) is left out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .python_constants import Unknown, evaluate
from .wheels import open_wheel

PATH = "agentprobe/injection/carriers.py"
SLOT = "\x00"  # what the lambda's parameter evaluates to: where the instruction goes


@dataclass(frozen=True)
class Carrier:
    name: str
    channel: str  # "email" | "document" | "webpage"
    template: str  # SLOT marks the instruction's place

    def fill(self, instruction: str) -> str:
        return self.template.replace(SLOT, instruction)


def parse_carriers(source: str) -> list[Carrier]:
    """The evaluable carriers of carriers.py's source, in file order."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Carrier"):
            continue
        if len(node.args) != 4 or not isinstance(node.args[3], ast.Lambda):
            continue
        name, channel = (evaluate(a, {}) for a in node.args[:2])
        body = node.args[3]
        (param,) = [a.arg for a in body.args.args]
        try:
            template = evaluate(body.body, {param: SLOT})
        except Unknown:
            continue
        if isinstance(template, str) and template.count(SLOT) == 1:
            out.append(Carrier(str(name), str(channel), template))
    return out


def load_carriers(cache: Path | str | None = None) -> list[Carrier]:
    return parse_carriers(open_wheel("agentprobe-injection", cache).text(PATH))
