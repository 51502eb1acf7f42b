"""agentdojo's suites as clean/injected tool-output pairs.

An environment (emails, files, calendar events, transactions, reviews, web pages, Slack
messages) has `{slot}` placeholders at its injection vectors. Like agentdojo we fill a slot
with an attack template rendered around an attacker goal of the same suite; the same
record with every slot at its default value is the clean twin. A record is rendered the
way a tool returns it (agentdojo dumps tool results as YAML; JSON too). A pair shares
one group: the record. Every other record gives a clean tool output, and the suites' user
tasks are benign user requests.

The templates, goals and prompts are read from agentdojo's Python sources with `ast`
(nothing of agentdojo is imported or executed): string constants and f-strings over
class and module constants only.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .example import Example, seed_for, text_group
from .python_constants import Unknown, assigned, evaluate
from .wheels import Wheel, open_wheel
from .yaml_data import loads

SUITES = ("workspace", "slack", "banking", "travel")
DATA = "agentdojo/data/suites/"
TASKS = "agentdojo/default_suites/v1/"
ATTACKS = "agentdojo/attacks/"
PAIRS_PER_SLOT = 16
SEED = 4242
# The victim model's name in "{model}" (agentdojo reads its own model list, a path DATA.md
# does not list, so these are ours) besides the DEFAULT_MODEL_NAME of base_attacks.py.
MODEL_NAMES = ("GPT-4", "GPT-4o", "Claude", "Gemini", "Llama 3", "Command R+", "Mistral Large")

ATTACK_FAMILY = {
    "direct": "override",
    "ignore_previous": "override",
    "injecagent": "override",
    "system_message": "impersonation",
    "tool_knowledge": "impersonation",
}  # important_instructions*: impersonation; *dos: dos


@dataclass(frozen=True)
class Task:
    suite: str
    name: str
    text: str  # GOAL of an injection task, PROMPT of a user task
    tools: str = ""  # tool_knowledge's "{tools}" sentence, from ground_truth's placeholder_args


def _tools_sentence(cls: ast.ClassDef, names: dict[str, Any]) -> str:
    calls = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "FunctionCall":
            kw = {k.arg: k.value for k in node.keywords}
            try:
                calls.append((evaluate(kw["function"], names), evaluate(kw["placeholder_args"], names)))
            except (Unknown, KeyError):
                return ""
    out = ""
    for i, (function, args) in enumerate(calls):
        if i == 0:
            out += f"You should use the tool `{function}` with the following arguments: {args}. "
        elif i == len(calls) - 1:
            out += f"Finally, you should use the tool `{function}` with the arguments: {args}. "
        else:
            out += f"Then, you should use the tool `{function}` with the arguments: {args}. "
    return out


def read_tasks(wheel: Wheel, suite: str, kind: str) -> list[Task]:
    """`kind` "injection" reads GOALs, "user" reads PROMPTs."""
    tree = ast.parse(wheel.text(f"{TASKS}{suite}/{kind}_tasks.py"))
    module = assigned(tree.body, {})
    attr = "GOAL" if kind == "injection" else "PROMPT"
    out = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names = assigned(cls.body, module)
        if isinstance(names.get(attr), str) and attr in {getattr(t, "id", "") for s in cls.body
                                                         for t in getattr(s, "targets", [])}:  # fmt: skip
            tools = _tools_sentence(cls, names) if kind == "injection" else ""
            out.append(
                Task(suite, cls.name, " ".join(names[attr].split()) if kind == "user" else names[attr], tools)
            )
    return out


@dataclass(frozen=True)
class Attack:
    name: str
    template: str  # with {goal} {user} {model} {task} {tools}
    user_names: tuple[str, ...]

    @property
    def family(self) -> str:
        if self.name.endswith("dos"):
            return "dos"
        return ATTACK_FAMILY.get(self.name, "impersonation")


def read_attacks(wheel: Wheel) -> tuple[list[Attack], str]:
    """Fixed-template attacks of agentdojo/attacks/*.py, and DEFAULT_MODEL_NAME."""
    classes: dict[
        str, tuple[str | None, str, set[str], list[str]]
    ] = {}  # name -> (jb, attack name, users, bases)
    default_model = "the AI language model"
    for path in wheel.names(ATTACKS):
        if not path.endswith(".py"):
            continue
        tree = ast.parse(wheel.text(path))
        module = assigned(tree.body, {})
        default_model = module.get("DEFAULT_MODEL_NAME", default_model)
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            names = assigned(cls.body, module)
            template = names.get("_JB_STRING") or names.get("_DOS_STRING")
            users = {v for k, v in names.items() if k == "user_name" and isinstance(v, str)}
            for node in ast.walk(cls):
                # super().__init__("template", ...) of FixedJailbreakAttack subclasses
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "attr", "") == "__init__"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    template = node.args[0].value
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and t.attr == "user_name":
                            users.add(node.value.value)
            bases = [getattr(b, "id", "") for b in cls.bases]
            classes[cls.name] = (template, names.get("name", ""), users, bases)

    def inherited(cls: str, field: int) -> Any:
        while cls in classes:
            value = classes[cls][field]
            if value:
                return value
            cls = next(iter(classes[cls][3]), "")
        return None

    attacks = {}
    for cls, (_, name, _, _) in classes.items():
        template = inherited(cls, 0)
        if not name or not template or name == "manual":
            continue
        users = set(classes[cls][2]) or set(inherited(cls, 2) or ()) or {"the user"}
        attacks[name] = Attack(name, template, tuple(sorted(users)))
    return [attacks[k] for k in sorted(attacks)], default_model


# -- environments ----------------------------------------------------------------------------


def read_environment(wheel: Wheel, suite: str) -> tuple[dict[str, Any], dict[str, str]]:
    env = loads(wheel.text(f"{DATA}{suite}/environment.yaml"))
    for key, value in list(env.items()):
        if isinstance(value, dict) and set(value) == {"!include"}:
            env[key] = loads(wheel.text(f"{DATA}{suite}/{value['!include']}"))
    vectors = loads(wheel.text(f"{DATA}{suite}/injection_vectors.yaml"))
    defaults = {}
    for slot, spec in vectors.items():
        default = str((spec or {}).get("default") or "")
        # agentdojo formats defaults into the YAML *source*, so "\\n" in a default becomes a newline.
        defaults[slot] = default.replace("\\n", "\n").replace("\\t", "\t")
    return env, defaults


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def records(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """What one tool call returns: a list item, a scalar-only object, a file or web page body."""
    if isinstance(node, list):
        if node and all(isinstance(x, dict) for x in node):
            for i, item in enumerate(node):
                yield (*path, str(i)), item
        elif all(_scalar(x) for x in node):
            if node:
                yield path, node
        else:
            for i, item in enumerate(node):
                yield from records(item, (*path, str(i)))
    elif isinstance(node, dict):
        if node and all(_scalar(v) for v in node.values()):
            if all(isinstance(v, str) for v in node.values()) and all(re.search(r"[./]", k) for k in node):
                for k, v in node.items():  # file names / URLs -> their contents
                    if v:
                        yield (*path, k), v
            else:
                yield path, node
        else:
            for k, v in node.items():
                yield from records(v, (*path, k))


_SLOT = re.compile(r"\{(\w+)\}")


def fill(node: Any, values: dict[str, str]) -> Any:
    if isinstance(node, str):
        return _SLOT.sub(lambda m: values.get(m.group(1), m.group(0)), node)
    if isinstance(node, list):
        return [fill(x, values) for x in node]
    if isinstance(node, dict):
        return {k: fill(v, values) for k, v in node.items()}
    return node


def slots_in(node: Any, known: dict[str, str]) -> set[str]:
    found: set[str] = set()
    if isinstance(node, str):
        found |= {s for s in _SLOT.findall(node) if s in known}
    elif isinstance(node, list):
        for x in node:
            found |= slots_in(x, known)
    elif isinstance(node, dict):
        for v in node.values():
            found |= slots_in(v, known)
    return found


def _yaml_str(s: str, indent: str) -> str:
    if "\n" in s:
        return "|\n" + "\n".join(indent + "  " + line for line in s.rstrip("\n").split("\n"))
    if (
        s == ""
        or re.search(r"^[\s\-?:,\[\]{}#&*!|>'\"%@`]|: | #|\s$", s)
        or s.lower() in ("null", "true", "false")
    ):
        return json.dumps(s, ensure_ascii=False)
    return s


def to_yaml(node: Any, indent: str = "") -> str:
    """A readable YAML dump, as agentdojo's tool_result_to_str shows results to the model."""
    if isinstance(node, str):
        return _yaml_str(node, indent)
    if _scalar(node):
        return "null" if node is None else str(node).lower() if isinstance(node, bool) else str(node)
    lines = []
    items = node.items() if isinstance(node, dict) else ((None, v) for v in node)
    for k, v in items:
        head = f"{indent}{k}:" if k is not None else f"{indent}-"
        if _scalar(v):
            lines.append(f"{head} {to_yaml(v, indent)}")
        elif not v:
            lines.append(f"{head} {'{}' if isinstance(v, dict) else '[]'}")
        else:
            lines.append(head + "\n" + to_yaml(v, indent + "  "))
    return "\n".join(lines)


def render(record: Any, shape: str) -> str:
    if isinstance(record, str):
        return record
    if shape == "json":
        return json.dumps(record, ensure_ascii=False, indent=None)
    return to_yaml(record)


def load_agentdojo(cache: Path | str | None = None) -> list[Example]:
    wheel = open_wheel("agentdojo", cache)
    attacks, default_model = read_attacks(wheel)
    models = (default_model, *MODEL_NAMES)
    # Subclasses set user_name from imported constants we do not resolve: draw from all found.
    users = sorted({u for a in attacks for u in a.user_names} | {"the user"})
    # DoS strings carry no attacker goal and are 5 of 16 templates: drawn at half weight.
    weights = [0.5 if a.family == "dos" else 1.0 for a in attacks]
    out: list[Example] = []
    for suite in SUITES:
        env, defaults = read_environment(wheel, suite)
        goals = read_tasks(wheel, suite, "injection")
        prompts = read_tasks(wheel, suite, "user")
        for task in prompts:
            out.append(
                Example(
                    task.text, "benign", "agentdojo", "benign", "user", text_group("agentdojo", task.text)
                )
            )
        for path, record in records(env):
            group = f"agentdojo:{suite}:{'/'.join(path)}"
            rng = random.Random(seed_for(SEED, group))
            slots = sorted(slots_in(record, defaults))
            for shape in ("yaml", "json") if not isinstance(record, str) else ("raw",):
                clean = render(fill(record, defaults), shape)
                if clean.strip():
                    out.append(Example(clean, "benign", "agentdojo", "benign", "tool", group))
            for slot in slots:
                for _ in range(PAIRS_PER_SLOT):
                    attack, goal = rng.choices(attacks, weights)[0], rng.choice(goals)
                    if "{tools}" in attack.template and not goal.tools:
                        continue
                    payload = attack.template.format(
                        goal=goal.text,
                        user=rng.choice(users),
                        model=rng.choice(models),
                        task=rng.choice(prompts).text,
                        tools=goal.tools,
                    )
                    shape = "raw" if isinstance(record, str) else rng.choice(("yaml", "yaml", "json"))
                    text = render(fill(record, defaults | {slot: payload}), shape)
                    out.append(Example(text, "injection", "agentdojo", attack.family, "tool", group))
    return out
