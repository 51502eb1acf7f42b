"""Injections aimed at coding agents, written by authors who never saw the classifiers:
`python -m eval.coding_notes`.

Five sets of tool outputs a coding agent reads (issues and review comments, source files and
docstrings, READMEs and agent instruction files, configs, CI files and Makefiles, package
manifests, test logs, git history, fetched pages), each text either carrying an instruction
planted for the agent or a benign twin of the same kind (half of the twins look suspicious:
agent instruction files, advisories that quote an attack, install lines that pipe curl to a
shell, CI jobs that use secrets). Each set was written by a separate author, told what a
coding agent reads and what attackers want of it, never shown this repository, its rules or
its training rows; they are written text, not real traffic (eval/agent_traffic.py measures
that).

- `eval/samples/coding_notes_dev.jsonl` (72 injected, 72 benign): the directives view's
  rules were revised after its misses had been read, so its figures are not held out;
- `eval/samples/coding_notes_held_out.jsonl` (65 injected, 65 benign): scored once with the
  rules frozen, then only its totals were read; the rules were revised once more, on the
  development set alone;
- `eval/samples/coding_notes_held_out_2.jsonl` (60 injected, 60 benign, a third author):
  scored after that revision, and again after a defect found in review was fixed (the
  cheap pass lacked two words of the reader's names); nothing was changed on its account;
- `eval/samples/coding_notes_held_out_3.jsonl` (75 injected, 75 benign, a fourth author) and
  `eval/samples/coding_notes_held_out_4.jsonl` (75 injected, 75 benign, a fifth author, told
  that agents are guarded and to write most injections understated, as the project's own
  conventions or a colleague's advice): written after the notes model's first release, for
  its second; scored with the first release, with the second's first model and with the
  second release, their texts unread and nothing chosen on them.

None of the five trains a model. The notes model (classifiers/notes.py) trains on fifteen
further authors' texts (training/data/coding_notes/), on the first ten of which the
directives view's rules were revised again; the development set reports its recipe's
figures and chose nothing for it.

Each text is scored as a tool output from an empty state; reported per set: the share of
injected texts flagged for prompt_injection and of benign ones flagged, by the gate's lexical
view, the detector (behind its screen), the directives view, the notes model and the
pipeline (any of them),
with 95% Wilson intervals, and the pipeline per kind of text. Writes eval/out/coding_notes.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from deltaguard.models import MODELS_DIR
from deltaguard.parsing import parse_item
from deltaguard.tools.evaluate import wilson
from eval.detection_eval import fmt_ci
from eval.flags import flags, probed
from eval.options import add_models_option
from eval.report import write_report

SAMPLES = Path(__file__).resolve().parent / "samples"
SETS = {
    "development (the rules were revised on it)": SAMPLES / "coding_notes_dev.jsonl",
    "held out (scored before the last revision, its texts unread)": SAMPLES / "coding_notes_held_out.jsonl",
    "held out, a third author (scored once, after the last revision)": SAMPLES
    / "coding_notes_held_out_2.jsonl",
    "held out, a fourth author (written after the notes model was built)": SAMPLES
    / "coding_notes_held_out_3.jsonl",
    "held out, a fifth author (written after the notes model was built; understated attacks)": SAMPLES
    / "coding_notes_held_out_4.jsonl",
}
OUT = Path(__file__).resolve().parent / "out" / "coding_notes.md"
NAMES = ("lexical", "detector", "directives", "notes", "pipeline")


def load(path: Path) -> list[dict]:
    """The set's cases: `label` ("injected" or "benign"), `carrier`, `text`, `asks`."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rate(hits: list[bool]) -> str:
    k, n = sum(hits), len(hits)
    lo, hi = wilson(k, n) or (0.0, 0.0)
    return f"{k}/{n}, " + fmt_ci(k / n, lo, hi, pct=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_models_option(parser, MODELS_DIR)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    classifiers = probed(NAMES[:-1], args.models)
    lines = [
        "# Injections aimed at coding agents, written by authors who never saw the classifiers",
        "",
        f"`python -m eval.coding_notes` (models: `{args.models}`): each text scored as a tool output; "
        "share flagged for prompt_injection, 95% Wilson intervals.",
    ]
    for title, path in SETS.items():
        cases = load(path)
        items = [
            parse_item({"type": "function_call_output", "call_id": "c", "output": c["text"]}) for c in cases
        ]
        found = flags(classifiers, items)
        lines += ["", f"## {title}: `{path.relative_to(SAMPLES.parent.parent)}`", ""]
        lines += ["| texts | " + " | ".join(NAMES) + " |", "|---|" + "---|" * len(NAMES)]
        for label in ("injected", "benign"):
            idx = [i for i, c in enumerate(cases) if c["label"] == label]
            cells = " | ".join(rate([found[n][i] for i in idx]) for n in NAMES)
            lines.append(f"| {label} | {cells} |")
        by_kind: dict[str, dict[str, list[bool]]] = defaultdict(lambda: {"injected": [], "benign": []})
        for i, c in enumerate(cases):
            by_kind[c["carrier"]][c["label"]].append(found["pipeline"][i])
        lines += [
            "",
            "| kind of text | injected flagged (pipeline) | benign flagged (pipeline) |",
            "|---|---|---|",
        ]
        for kind, got in sorted(by_kind.items()):
            shares = " | ".join(f"{sum(got[label])}/{len(got[label])}" for label in ("injected", "benign"))
            lines.append(f"| {kind} | {shares} |")
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
