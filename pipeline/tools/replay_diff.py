"""Replaying recorded flagged transcripts, and what a new policy or model changes.

    deltaguard replay --from-store flags.db --diff --threshold prompt_injection=0.99
    deltaguard replay --from-store flags.db --conversation resp_123 --models-dir models-v2 --diff

The recordings (`deltaguard.recording`) carry the verdict the pipeline gave at every
turn. Replaying them with other thresholds (`--threshold`), another models directory
(`--models-dir`: another manifest, so other model versions and manifest thresholds) or
another classifier set (`--classifiers`) and diffing per turn shows exactly which
verdicts a change would flip, on the conversations that mattered.

A diff row is one (conversation, turn, category) whose score moved by more than 1e-6
or whose flagged state changed; a turn whose decision changed with no such category
(an action change) gets one row with category "-". Turns that did not change give no
row. With `--json`, the report goes under the optional top-level key `diff`; the keys
of docs/contract.md section 2 are unchanged.

Redacted recordings: a redacted secret or PII value is not in the transcript, so the
replay cannot find it again, and the other classifiers read `[REDACTED:<kind>]` where
the value was. Rows from the first redacted turn on are marked `redacted` (`*` in the
table): they may show redaction rather than the policy or model change.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deltaguard.errors import TranscriptError
from deltaguard.recording import RecordedTranscript, read_recorded
from deltaguard.state.scoring import Scorer
from deltaguard.tools.replay import Mode, ReplayResult, replay
from deltaguard.tools.summary import table
from deltaguard.transcripts import Conversation

SCORE_TOLERANCE = 1e-6  # as docs/contract.md section 3


@dataclass(frozen=True, slots=True)
class VerdictChange:
    """One row of the diff: a category of one turn whose verdict changed."""

    conversation: str
    recording: int  # the store's row id (a conversation may have several branches)
    turn: int
    category: str  # "-": the decision changed with no category change (an action change)
    old_score: float | None
    new_score: float | None
    old_flagged: bool
    new_flagged: bool
    old_decision: str | None
    new_decision: str | None
    old_ms: float | None  # the turn's latency when recorded (the recorder's fold)
    new_ms: float | None  # the turn's latency in this replay
    redacted: bool = False  # this turn or an earlier one was redacted before recording


def _score_changed(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old is not new
    return abs(old - new) > SCORE_TOLERANCE


def _total_ms(turn: dict[str, Any] | None) -> float | None:
    if turn is None:
        return None
    ms = turn.get("latency_ms", {}).get("total")
    return None if ms is None else round(float(ms), 4)


def diff_turns(
    conversation: str,
    old_turns: Sequence[dict[str, Any]],
    new_turns: Sequence[dict[str, Any]],
    recording: int = 0,
    redacted_from: int | None = None,
) -> list[VerdictChange]:
    """The changed (turn, category) rows between recorded and replayed verdicts.

    `redacted_from`: the first turn with a redacted item; scores are conversation-level,
    so from that turn on a change may come from redaction alone (rows are marked)."""
    rows: list[VerdictChange] = []
    for t in range(max(len(old_turns), len(new_turns))):
        old = old_turns[t] if t < len(old_turns) else None
        new = new_turns[t] if t < len(new_turns) else None
        old_scores = old["category_scores"] if old else {}
        new_scores = new["category_scores"] if new else {}
        old_flagged = set(old["flagged_categories"]) if old else set()
        new_flagged = set(new["flagged_categories"]) if new else set()
        old_decision = old["decision"] if old else None
        new_decision = new["decision"] if new else None
        turn_rows = []
        for cat in [*old_scores, *(c for c in new_scores if c not in old_scores)]:
            o, n = old_scores.get(cat), new_scores.get(cat)
            if _score_changed(o, n) or (cat in old_flagged) != (cat in new_flagged):
                turn_rows.append((cat, o, n))
        if not turn_rows and old_decision != new_decision:
            turn_rows.append(("-", None, None))
        rows += [
            VerdictChange(
                conversation=conversation,
                recording=recording,
                turn=t,
                category=cat,
                old_score=o,
                new_score=n,
                old_flagged=cat in old_flagged,
                new_flagged=cat in new_flagged,
                old_decision=old_decision,
                new_decision=new_decision,
                old_ms=_total_ms(old),
                new_ms=_total_ms(new),
                redacted=redacted_from is not None and t >= redacted_from,
            )
            for cat, o, n in turn_rows
        ]
    return rows


def diff_report(
    recorded: Sequence[RecordedTranscript], result: ReplayResult, scorer: Scorer, source: str
) -> dict[str, Any]:
    """The `diff` key of `replay --json`: per recording and per changed row."""
    conversations = []
    rows: list[VerdictChange] = []
    for rec, conv in zip(recorded, result.conversations, strict=True):
        redacted_turns = rec.redactions.get("turns", [])
        changes = diff_turns(
            rec.conversation_id,
            rec.verdicts,
            conv["turns"],
            rec.id,
            min(redacted_turns) if redacted_turns else None,
        )
        rows += changes
        changed_turns = {c.turn for c in changes}
        conversations.append(
            {
                "id": rec.conversation_id,
                "recording": rec.id,
                "tenant": rec.tenant,
                "response_id": rec.response_id,
                "recorded_decision": rec.decision,
                "recorded_categories": rec.categories,
                "redacted": rec.redacted,
                "redacted_categories": rec.redactions.get("categories", []),
                "redacted_turns": redacted_turns,
                "classifier_versions": {"recorded": rec.classifier_versions, "replayed": scorer.versions},
                "turns_compared": max(len(rec.verdicts), len(conv["turns"])),
                "turns_changed": len(changed_turns),
                "decisions_changed": sum(
                    1
                    for t in changed_turns
                    if t >= len(rec.verdicts)
                    or t >= len(conv["turns"])
                    or rec.verdicts[t]["decision"] != conv["turns"][t]["decision"]
                ),
            }
        )
    return {
        "source": source,
        "tolerance": SCORE_TOLERANCE,
        "policy": {c: p.model_dump(mode="json") for c, p in scorer.policy.categories.items()},
        "classifier_versions": scorer.versions,
        "turns_compared": sum(c["turns_compared"] for c in conversations),
        "turns_changed": sum(c["turns_changed"] for c in conversations),
        "decisions_changed": sum(c["decisions_changed"] for c in conversations),
        "conversations": conversations,
        "rows": [asdict(r) for r in rows],
    }


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def diff_text(diff: dict[str, Any], limit: int = 200) -> str:
    """The diff as a readable table (only changed rows; at most `limit` of them)."""
    out = [
        f"diff against the recorded verdicts: {len(diff['conversations'])} recordings, "
        f"{diff['turns_compared']} turns compared, {diff['turns_changed']} turns changed, "
        f"{diff['decisions_changed']} decisions changed"
    ]
    versions = {
        (json.dumps(c["classifier_versions"]["recorded"], sort_keys=True)) for c in diff["conversations"]
    }
    for v in sorted(versions):
        if json.loads(v) != diff["classifier_versions"]:
            out.append(
                f"recorded with classifiers {v}; replayed with {json.dumps(diff['classifier_versions'])}"
            )
    rows = diff["rows"]
    if not rows:
        out.append("no verdict changed")
        return "\n".join(out)
    shown = rows[:limit]
    out += [
        "",
        table(
            [
                "conversation",
                "turn",
                "category",
                "old score",
                "new score",
                "old decision",
                "new decision",
                "ms old",
                "ms new",
            ],
            [
                [
                    r["conversation"],
                    str(r["turn"]),
                    r["category"] + ("*" if r["redacted"] else ""),
                    _num(r["old_score"]) + (" F" if r["old_flagged"] else ""),
                    _num(r["new_score"]) + (" F" if r["new_flagged"] else ""),
                    r["old_decision"] or "-",
                    r["new_decision"] or "-",
                    _ms(r["old_ms"]),
                    _ms(r["new_ms"]),
                ]
                for r in shown
            ],
        ),
        "F: flagged (score at or over the threshold).",
    ]
    if any(r["redacted"] for r in shown):
        out.append(
            "*: this turn or an earlier one was redacted before recording: the replay does not see the "
            "redacted values, so its scores may differ for that reason alone."
        )
    if len(rows) > len(shown):
        out.append(f"... and {len(rows) - len(shown)} more rows (all of them in --json)")
    return "\n".join(out)


# -- replaying the store ---------------------------------------------------------------


def replay_store(
    path: Path,
    scorer: Scorer,
    mode: Mode = "delta",
    conversation_id: str | None = None,
    tenant: str | None = None,
    on_line: Callable[[], None] | None = None,
) -> tuple[ReplayResult, list[RecordedTranscript]]:
    """Replay the store's recordings; returns the result and the recordings replayed
    (in the order of `result.conversations`)."""
    recorded = read_recorded(path, conversation_id, "*" if tenant is None else tenant)
    ok: list[RecordedTranscript] = []
    source: list[Conversation | TranscriptError] = []
    for rec in recorded:
        try:
            source.append(rec.conversation(str(path)))
            ok.append(rec)
        except TranscriptError as exc:
            source.append(exc)
    return replay(source, scorer, mode, on_line=on_line), ok


def add_replay_options(rp: argparse.ArgumentParser) -> None:
    """`replay`'s options for recorded transcripts, other models and diffs."""
    from deltaguard.classifiers.registry import parse_names
    from deltaguard.classifiers.vouched import add_vouch_option

    rp.add_argument("--from-store", type=Path, metavar="PATH", help="replay the recordings of this store")
    rp.add_argument("--conversation", metavar="ID", help="only this conversation (with --from-store)")
    rp.add_argument("--tenant", help="only this tenant's recordings (with --from-store)")
    rp.add_argument(
        "--models-dir", type=Path, metavar="DIR", help="another models directory (manifest, versions)"
    )
    rp.add_argument(
        "--classifiers",
        type=parse_names,
        help="comma-separated classifier names (default: the default set)",
    )
    rp.add_argument(
        "--diff", action="store_true", help="report the verdicts that differ from the recorded ones"
    )
    add_vouch_option(rp, default=[])


def replay_scorer(args: argparse.Namespace) -> Scorer:
    """The scorer `replay` uses: classifiers, models directory and thresholds from args."""
    from deltaguard.classifiers.registry import DEFAULT_NAMES
    from deltaguard.models import MODELS_DIR
    from deltaguard.state.loading import build_scorer
    from deltaguard.state.policy import load_policy

    policy_path = getattr(args, "policy", None)
    return build_scorer(
        getattr(args, "classifiers", None) or DEFAULT_NAMES,
        getattr(args, "models_dir", None) or MODELS_DIR,
        policy=load_policy(policy_path) if policy_path else None,
        thresholds=dict(args.threshold),
        vouch=getattr(args, "vouch", None) or (),
    )


def cmd_replay_store(args: argparse.Namespace) -> int:
    """`deltaguard replay --from-store PATH [--conversation ID] [--diff]`."""
    from tqdm import tqdm

    from deltaguard.tools.summary import replay_summary

    if args.file is not None:
        print("deltaguard replay: give a FILE or --from-store, not both", file=sys.stderr)
        return 2
    if not args.from_store.is_file():
        print(f"deltaguard replay: {args.from_store}: no such recording store", file=sys.stderr)
        return 2
    scorer = replay_scorer(args)
    show = sys.stderr.isatty() and not args.no_progress
    with tqdm(unit="conv", disable=not show, file=sys.stderr) as bar:
        result, recorded = replay_store(
            args.from_store, scorer, args.mode, args.conversation, args.tenant, lambda: bar.update(1)
        )
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    if not recorded and not result.errors:
        which = f" for conversation {args.conversation!r}" if args.conversation else ""
        print(f"deltaguard replay: no recordings{which} in {args.from_store}", file=sys.stderr)
    out = result.to_json()
    diff = diff_report(recorded, result, scorer, str(args.from_store)) if args.diff else None
    if diff is not None:
        out["diff"] = diff
    if args.json_out:
        args.json_out.write_text(json.dumps(out, ensure_ascii=False) + "\n", encoding="utf-8")
    print(replay_summary(result))
    if diff is not None:
        print()
        print(diff_text(diff))
    return 1 if result.errors else 0
