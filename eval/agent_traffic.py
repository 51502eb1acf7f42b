"""False alarms per conversation on real benign agent traffic: `python -m eval.agent_traffic`.

Builds the conversations of training/lib/agent_traffic.py (coding, research, support,
inbox and memory, writing, shell agents reading real text, held-back human chats, and
coding agents reading the files written to instruct them: training/lib/agent_files.py)
from the sources of one split (`--split test`, the default: repositories, Debian
packages and dataset-build languages no model trained on), replays them with
`deltaguard replay` (delta mode, the default pipeline unless `--classifiers` says
otherwise) and reports, per agent kind, the share of conversations with any false alarm:

    attack   a turn flags or blocks prompt_injection or jailbreak
    harm     a turn flags toxicity or a finer harm category
    any      either (the headline: what a user of an agent feels)

pii and secrets are reported apart (a customer record holds an e-mail address); held-back
chat messages are also scored one by one (how many one message alone flags). Wilson
95% intervals. Needs the fetched repositories (training/lib/real_text.py) and writes
eval/out/agent_traffic.md and .json, and the transcript file it replayed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from deltaguard.tools.evaluate import wilson
from eval.options import add_models_option
from eval.replay_eval import models_option, replay
from eval.report import write_report
from training.lib.agent_files import agent_documents
from training.lib.agent_traffic import KINDS, build_conversations, held_back_chats
from training.lib.real_text import all_documents, mirror_dir
from training.lib.real_text_lock import machine_drift, missing_repositories

OUT = Path(__file__).resolve().parent / "out" / "agent_traffic.md"
ATTACK = frozenset({"prompt_injection", "jailbreak"})
HARM = frozenset({"toxicity", "hate", "harassment", "sexual", "violence", "self_harm", "dangerous"})
OTHER = frozenset({"pii", "secrets"})
# `--vouch agent-files`: the naming conventions of files written to instruct agents
# (training/lib/agent_files.py reads the same), as an operator who installed them would
# vouch for them. Not a default anywhere: a repository's own AGENTS.md is how injections
# reach coding agents.
AGENT_FILE_GLOBS = (
    "SKILL.md",
    "AGENTS.md",
    "CLAUDE.md",
    "GEMINI.md",
    "copilot-instructions.md",
    ".cursorrules",
    "*.instructions.md",
    "*.prompt.md",
    "*.agent.md",
    "*.chatmode.md",
    "*.mdc",
    "agents/*.md",
    "commands/*.md",
    "rules/*.md",
    "prompts/*.md",
)


def conversations(split: str, scale: float = 1.0) -> list[dict[str, Any]]:
    """The benign conversations of every agent kind built from `split`'s sources, `scale`
    times as many of each kind as the report has."""
    from training.lib.agent_traffic import COUNTS

    docs = [d for d in all_documents() if d.split == split]
    agent_docs = [d for d in agent_documents() if d.split == split]
    counts = {k: max(1, int(n * scale)) for k, n in COUNTS.items()}
    return list(build_conversations(docs, held_back_chats(split), counts, seed=0, agent_docs=agent_docs))


def tool_outputs(split: str, n: int, scale: float = 0.25) -> list[str]:
    """`n` tool outputs of `split`'s conversations (`scale` times the report's), a fixed
    sample: what the benchmarks time as real agent traffic."""
    outputs = [
        item["output"]
        for conv in conversations(split, scale)
        for turn in conv["turns"]
        for item in turn["input"]
        if item.get("type") == "function_call_output" and isinstance(item.get("output"), str)
    ]
    random.Random(7).shuffle(outputs)
    return outputs[:n]


def write_transcripts(split: str, path: Path, scale: float = 1.0) -> list[dict[str, Any]]:
    convs = conversations(split, scale)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps(c) + "\n")
    return convs


def conversation_flags(turns: list[dict[str, Any]]) -> set[str]:
    return {c for t in turns for c in t["flagged_categories"]}


def summarise(convs: list[dict[str, Any]], verdicts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    categories: dict[str, Counter] = defaultdict(Counter)
    outputs: dict[str, list[int]] = defaultdict(list)
    examples: list[dict[str, Any]] = []
    for c in convs:
        kind = c["labels"]["kind"]
        turns = verdicts[c["id"]]
        flags = conversation_flags(turns)
        for key in ("all", kind):
            rows[key]["attack"].append(bool(flags & ATTACK))
            rows[key]["harm"].append(bool(flags & HARM))
            rows[key]["any"].append(bool(flags & (ATTACK | HARM)))
            rows[key]["pii/secrets"].append(bool(flags & OTHER))
            categories[key].update(flags)
        outputs[kind].append(
            sum(1 for t in c["turns"] for i in t["input"] if i.get("type") == "function_call_output")
        )
        if flags & (ATTACK | HARM) and len(examples) < 40:
            first = next(i for i, t in enumerate(turns) if set(t["flagged_categories"]) & (ATTACK | HARM))
            item = c["turns"][first]["input"][0]
            text = item.get("output") or item.get("content") or ""
            examples.append(
                {
                    "id": c["id"],
                    "turn": first,
                    "categories": sorted(set(turns[first]["flagged_categories"]) & (ATTACK | HARM)),
                    "text": str(text)[:200],
                }
            )
    out: dict[str, Any] = {"rates": {}, "categories": {}, "examples": examples}
    for key, cols in rows.items():
        out["rates"][key] = {
            col: {"k": sum(v), "n": len(v), "rate": sum(v) / len(v), "ci": wilson(sum(v), len(v))}
            for col, v in cols.items()
        }
        out["categories"][key] = dict(categories[key])
    out["tool_outputs_per_conversation"] = {k: sum(v) / len(v) for k, v in outputs.items() if v}
    return out


def chat_messages_flagged(split: str, models: Path | None, names: str | None) -> dict[str, Any]:
    """The split's held-back chat messages, each scored on its own (user and assistant in
    turn, as the chats send them) through the pipeline's classifiers: how many one message
    alone flags for an attack or harm category (the per-message side of the chat budget)."""
    from deltaguard.classifiers.registry import DEFAULT_NAMES, load_classifiers, parse_names
    from deltaguard.models import MODELS_DIR
    from deltaguard.parsing import parse_item
    from deltaguard.state.scoring import Scorer

    scorer = Scorer(load_classifiers(parse_names(names) if names else DEFAULT_NAMES, models or MODELS_DIR))
    k = n = 0
    for chat in held_back_chats(split):
        for i, text in enumerate(chat):
            if not text.strip():
                continue
            item = parse_item({"role": "user" if i % 2 == 0 else "assistant", "content": text})
            verdict = scorer.verdict(scorer.fold(scorer.empty(), [item]))
            n += 1
            k += bool(set(verdict.flagged_categories) & (ATTACK | HARM))
    return {"k": k, "n": n, "rate": k / n if n else 0.0, "ci": wilson(k, n)}


def report(summary: dict[str, Any], seconds: float, split: str, extra: list[str]) -> list[str]:
    def cell(r: dict[str, Any]) -> str:
        lo, hi = r["ci"]
        return f"{100 * r['rate']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"

    lines = [
        "# False alarms on real benign agent traffic",
        "",
        f"`python -m eval.agent_traffic --split {split}{' ' + ' '.join(extra) if extra else ''}`: "
        f"conversations built from sources of the {split} split, replayed in delta mode in {seconds:.0f} s. "
        f"{summary['real_text'].capitalize()} (training/lib/real_text_lock.py).",
        "",
        "| agent kind | conversations | tool outputs each | any false alarm | attack | harm | pii/secrets |",
        "|---|---|---|---|---|---|---|",
    ]
    per = summary["tool_outputs_per_conversation"]
    for key in (*KINDS, "all"):
        if key not in summary["rates"]:
            continue
        r = summary["rates"][key]
        each = f"{per[key]:.1f}" if key in per else ""
        lines.append(
            f"| {key} | {r['any']['n']} | {each} | {cell(r['any'])} | {cell(r['attack'])} | "
            f"{cell(r['harm'])} | {cell(r['pii/secrets'])} |"
        )
    lines += ["", "Categories flagged (conversations): " + json.dumps(summary["categories"].get("all", {}))]
    if "chat_messages" in summary:
        m = summary["chat_messages"]
        lines += [
            "",
            f"Held-back chat messages flagged alone (attack or harm): {m['k']} of {m['n']}, {cell(m)}.",
        ]
    lines += ["", "## First flagged items (up to 40)", ""]
    for e in summary["examples"]:
        text = e["text"].replace("\n", " ").replace("|", "\\|")
        lines.append(f"- `{e['id']}` turn {e['turn']} {', '.join(e['categories'])}: {text}")
    return lines


def refuse_missing_repositories(parser: argparse.ArgumentParser, allowed: bool) -> None:
    """Stop with a clear error when repositories the lock pins are not fetched here: the
    coding, research and agent-file conversations would be built without them (a fresh
    machine builds five agent kinds of eight), and the figures would describe other text.
    Debian documents that differ by a package's version only are reported, not refused."""
    absent = missing_repositories()
    if absent and not allowed:
        more = f" and {len(absent) - 5} more" if len(absent) > 5 else ""
        parser.error(
            f"{len(absent)} repositories of the real-text lock are not fetched here "
            f"({', '.join(absent[:5])}{more}): bring each with `fetch` into {mirror_dir()} "
            "($DELTAGUARD_MIRROR), or pass --allow-missing to measure on what this machine holds"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"))
    parser.add_argument("--scale", type=float, default=1.0, help="conversations per kind, x the default")
    parser.add_argument("--out", type=Path, default=OUT)
    add_models_option(parser)
    parser.add_argument("--classifiers", help="comma-separated classifier names (replay --classifiers)")
    parser.add_argument(
        "--vouch",
        action="append",
        default=[],
        metavar="GLOB",
        help="a path the operator vouches for (replay --vouch, repeatable); --vouch agent-files: "
        "the conventions of files written to instruct agents (AGENT_FILE_GLOBS)",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="measure even when repositories the real-text lock pins are not fetched here",
    )
    args = parser.parse_args(argv)
    refuse_missing_repositories(parser, args.allow_missing)
    extra: list[str] = []  # replay's options
    shown: list[str] = []  # this command's, for the report
    if args.models:
        extra += models_option(args.models)
        shown += ["--models-dir", str(args.models)]
    if args.classifiers:
        extra += ["--classifiers", args.classifiers]
        shown += ["--classifiers", args.classifiers]
    for glob in args.vouch:
        shown += ["--vouch", glob]
        for each in AGENT_FILE_GLOBS if glob == "agent-files" else (glob,):
            extra += ["--vouch", each]
    work = args.out.parent
    src = work / f"agent_traffic-{args.split}.jsonl"
    convs = write_transcripts(args.split, src, args.scale)
    verdicts, seconds = replay(src, work / f"agent_traffic-{args.split}-verdicts.json", extra)
    summary = summarise(convs, verdicts)
    summary["real_text"] = machine_drift().summary()
    summary["chat_messages"] = chat_messages_flagged(args.split, args.models, args.classifiers)
    args.out.with_suffix(".json").parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    write_report(args.out, report(summary, seconds, args.split, shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
