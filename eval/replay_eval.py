"""The default pipeline through `deltaguard replay`, beside the v2 pipeline: `python -m eval.replay_eval`.

Every row of the detection corpus' test split (training/lib/detection_data.py; rows of the
allowed sources that no shipped model trained on) becomes a conversation of the shape an
agent sends:

- a user-channel row: one turn, the row as the user's message;
- a tool output or document: a user's task and the model's `function_call`, then a turn
  whose delta is the row as the `function_call_output` (the agent loop's next request).

Both pipelines replay the same file with the CLI (delta mode, `--json`); `--beside DIR`
puts the default set with another release's models (a copy of its models/) in v2's place,
and `--through-tools` delivers the user-channel rows as tool outputs too (what an attacker
plants in a page the agent fetches: judged as untrusted content, for injection only):

- **default**: today's default set (lexical-v3 on tool outputs, the conversation view
  on user messages, harm, and the detector in the monitor lane behind its screen);
- **v2**: the default set as it was before the fine-tuned detector and lexical-v3:
  secrets, pii, and the lexical, conversation and definitions views all on lexical-v2
  (`--classifiers`, and a models directory whose `lexical` entry is lexical-v2's).

A conversation counts as flagged when a turn flags prompt_injection or jailbreak (the
other categories are other classifiers' business: a harmful request is not an
injection). Reported per source and channel: attacks flagged, and benign conversations
flagged per benign set (Wilson 95% intervals), with the replayed per-turn classifier
time of the turn that carries the row (p50 / p95 wall ms, the CLI's own `latency_ms`)
and tokens scored. These are sources the models trained on (other rows of them): the
held-out figures are eval/detector_eval.py's. Writes eval/out/replay_eval.md and .json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.models import MODELS_DIR
from eval.report import write_report

OUT = Path(__file__).resolve().parent / "out" / "replay_eval.md"
ATTACK = frozenset({"prompt_injection", "jailbreak"})
V2_CLASSIFIERS = "secrets,pii,lexical,conversation,definitions"
TASKS = {
    "tool": ("Find out why the nightly build fails and fix it.", "read_file"),
    "document": ("Summarise the document I uploaded.", "fetch_document"),
}


REPLY = [{"role": "assistant", "content": "Done."}]


def tool_read(cid: str, task: str, tool: str, text: str) -> dict[str, Any]:
    """A conversation in which the agent reads `text` through `tool`: the user's task and the
    model's call, then `text` as the next turn's `function_call_output` (the agent loop's
    next request) and the model's answer."""
    call = {"type": "function_call", "call_id": "call_1", "name": tool, "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": text}
    return {
        "id": cid,
        "turns": [
            {"input": [{"role": "user", "content": task}], "output": [call]},
            {"input": [output], "output": REPLY},
        ],
    }


def conversation(i: int, row: dict[str, Any]) -> dict[str, Any]:
    """One test row as an agent conversation (see the module docstring)."""
    cid = f"row-{i}"
    if row["channel"] not in TASKS:
        return {"id": cid, "turns": [{"input": [{"role": "user", "content": row["text"]}], "output": REPLY}]}
    task, tool = TASKS[row["channel"]]
    return tool_read(cid, task, tool, row["text"])


def through_tools(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with the user channel's delivered as tool outputs (`--through-tools`)."""
    return [{**r, "channel": "tool"} if r["channel"] == "user" else r for r in rows]


def v2_models(tmp: Path) -> Path:
    """A copy of the models directory whose `lexical` entry serves lexical-v2."""
    out = tmp / "models-v2"
    shutil.copytree(MODELS_DIR, out, ignore=shutil.ignore_patterns("*.onnx"))
    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["models"]
    entries["lexical"] = dict(entries["lexical-v2"])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


def replay(src: Path, out: Path, extra: list[str]) -> tuple[dict[str, list[dict[str, Any]]], float]:
    """The CLI's per-turn verdicts by conversation id, and its wall time in seconds."""
    from deltaguard.cli import main as cli

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its summary table: not this report's
        code = cli(["replay", str(src), "--json", str(out), "--no-progress", *extra])
    if code != 0:
        raise RuntimeError(f"deltaguard replay {' '.join(extra)} failed")
    seconds = time.perf_counter() - t0
    verdicts = json.loads(out.read_text(encoding="utf-8"))["conversations"]
    return {c["id"]: c["turns"] for c in verdicts}, seconds


def models_option(models: Path | None) -> list[str]:
    """`replay`'s option for an evaluation's `--models-dir DIR` (none for the shipped models)."""
    return ["--models-dir", str(models)] if models else []


def replay_conversations(
    convs: list[dict[str, Any]], out: Path, extra: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """`replay` of built conversations: they are written beside `out` as its transcripts
    (`<stem>-transcripts.jsonl`), and the verdicts as `<stem>-verdicts.json`."""
    src = out.with_name(out.stem + "-transcripts.jsonl")
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("".join(json.dumps(c) + "\n" for c in convs), encoding="utf-8")
    verdicts, _seconds = replay(src, out.with_name(out.stem + "-verdicts.json"), extra)
    return verdicts


def wilson(k: float, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarise(rows: list[dict[str, Any]], verdicts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Flag rates per (source, channel) of attacks and per benign set, and the cost of
    the turn that carries each row."""
    cells: dict[str, list[bool]] = defaultdict(list)
    groups: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    latency: dict[str, list[float]] = defaultdict(list)
    tokens: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        turns = verdicts[f"row-{i}"]
        flagged = any(ATTACK & set(t["flagged_categories"]) for t in turns)
        if row["label"] == "benign":
            key = f"benign {row['fp_set']}"
            groups[key][row["group"]].append(flagged)
        else:
            key = f"{row['source']} ({'user' if row['channel'] == 'user' else 'tool/document'})"
        cells[key].append(flagged)
        channel = "user" if row["channel"] == "user" else "tool/document"
        latency[channel].append(float(turns[-1]["latency_ms"]["total"]))
        tokens[channel].append(int(turns[-1]["tokens_scored"]))
    out: dict[str, Any] = {"rates": {}, "cost": {}}
    for key, flags in sorted(cells.items()):
        k, n = sum(flags), len(flags)
        out["rates"][key] = {"n": n, "flagged": k / n, "ci": wilson(k, n)}
        if key in groups:
            # Each group weighs one, as in the threshold rule (train_detector's
            # most_sensitive_threshold): thirty fillings of one template are one document.
            shares = [sum(f) / len(f) for f in groups[key].values()]
            k, n = float(sum(shares)), len(shares)
            out["rates"][key]["by_group"] = {"n": n, "flagged": k / n, "ci": wilson(k, n)}
    for channel, ms in latency.items():
        out["cost"][channel] = {
            "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)),
            "mean_tokens": float(np.mean(tokens[channel])),
        }
    return out


def pct(cell: dict[str, Any]) -> str:
    lo, hi = cell["ci"]
    return f"{cell['flagged']:.1%} [{lo:.1%}, {hi:.1%}]"


def report(
    results: dict[str, dict[str, Any]], seconds: dict[str, float], n: int, beside: str = "v2"
) -> list[str]:
    default, v2 = results["default"], results[beside]
    what = (
        "v2: secrets, pii, and the lexical, conversation and definitions views on lexical-v2 "
        "(the default before lexical-v3 and the detector)."
        if beside == "v2"
        else f"{beside}: the default set with the models of `{beside}` (`--beside`)."
    )
    lines = [
        f"# The default pipeline through `deltaguard replay`, beside {beside}",
        "",
        f"`python -m eval.replay_eval`: the {n} rows of the detection corpus' test split as agent "
        "conversations (a user row: one turn; a tool output or document: the task and the model's "
        "function call, then the row as the next turn's `function_call_output`), replayed by "
        "`deltaguard replay` in delta mode. Flagged: a turn flags prompt_injection or jailbreak. "
        "Sources the shipped models trained on (their other rows); held-out figures: "
        f"`python -m eval.detector_eval`. {what}",
        "",
        f"| conversations | n | default | {beside} |",
        "|---|---|---|---|",
    ]
    for key, cell in default["rates"].items():
        lines.append(f"| {key} | {cell['n']} | {pct(cell)} | {pct(v2['rates'][key])} |")
    lines += [
        "",
        "Benign sets by group (each group of near-duplicates weighs one: a document template "
        "and its fillings, a conversation, a source file; the rule the operating points are "
        "chosen by; intervals treat the groups as the trials):",
        "",
        f"| benign set | groups | default | {beside} |",
        "|---|---|---|---|",
    ]
    for key, cell in default["rates"].items():
        if "by_group" in cell:
            g = cell["by_group"]
            lines.append(f"| {key} | {g['n']} | {pct(g)} | {pct(v2['rates'][key]['by_group'])} |")
    lines += [
        "",
        "Classifier time of the turn that carries the row (the CLI's `latency_ms`, wall ms on "
        "this machine; the detector's work counts in the default pipeline's turn, though the "
        "gateway runs it beside inference):",
        "",
        f"| turn | default p50 / p95 ms | {beside} p50 / p95 ms | default / {beside} tokens scored (mean) |",
        "|---|---|---|---|",
    ]
    for channel, cost in default["cost"].items():
        old = v2["cost"][channel]
        lines.append(
            f"| {channel} | {cost['p50_ms']:.2f} / {cost['p95_ms']:.2f} | {old['p50_ms']:.2f} / "
            f"{old['p95_ms']:.2f} | {cost['mean_tokens']:.0f} / {old['mean_tokens']:.0f} |"
        )
    lines += [
        "",
        f"Replay wall time: default {seconds['default']:.0f} s, {beside} {seconds[beside]:.0f} s "
        "(model loading included).",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N test rows (a smoke run)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--through-tools",
        action="store_true",
        help="deliver the user-channel rows as tool outputs (a jailbreak planted in a fetched page)",
    )
    parser.add_argument(
        "--beside",
        type=Path,
        help="a models directory (a previous release): the default set with its models is the "
        "second column instead of the v2 pipeline",
    )
    args = parser.parse_args(argv)
    from training.lib.detector_rows import load_rows

    rows = [r for r in load_rows() if r["split"] == "test"]
    rows = rows if args.limit is None else random.Random(5).sample(rows, min(args.limit, len(rows)))
    rows = through_tools(rows) if args.through_tools else rows
    results, seconds = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "test-split.jsonl"
        lines = (json.dumps(conversation(i, r)) for i, r in enumerate(rows))
        src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        beside = "v2" if args.beside is None else str(args.beside)
        pipelines = {
            "default": [],
            beside: (
                ["--classifiers", V2_CLASSIFIERS, "--models-dir", str(v2_models(Path(tmp)))]
                if args.beside is None
                else ["--models-dir", str(args.beside)]
            ),
        }
        for name, extra in pipelines.items():
            verdicts, seconds[name] = replay(src, Path(tmp) / f"{name}.json", extra)
            results[name] = summarise(rows, verdicts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"n": len(rows), **results}, indent=1))
    lines = report(results, seconds, len(rows), beside)
    if args.through_tools:
        lines[2:2] = ["`--through-tools`: the user-channel rows arrive as tool outputs.", ""]
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
