"""`deltaguard calibrate STORE`: `deltaguard eval` on recorded traffic and its review labels.

The reviewed recordings of the store (every flagged category marked confirmed or false
positive on the review page) become labelled conversations (`deltaguard.recording.labels`)
and are measured as a labelled file is: the same report, curves and policy file.
Recordings with a flag left unmarked are left out and counted (`unlabelled`).

Scores come from what was scored: a recording keeps the verdict of every turn, computed
on the conversation before redaction, so a leaked key that the store shows as
`[REDACTED:...]` still counts with the score it had. A turn is flagged again under the
policy calibrate is given (a category whose score reaches its threshold). Only when the
recording was scored by other classifier versions than the ones given (or holds no
scores) is its transcript replayed; a redacted one then cannot show its secrets and PII
again, and the report says so (`scores_from`, `notes`).

What the numbers mean: the store holds only conversations that were flagged, so the
negatives are the false positives the reviewers found, not the benign traffic that was
never flagged; a threshold chosen here meets the target rate on flagged traffic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deltaguard.errors import TranscriptError
from deltaguard.recording import RecordedTranscript, TranscriptStore
from deltaguard.recording.labels import is_reviewed, labelled_line
from deltaguard.state.scoring import Scorer
from deltaguard.state.tracker import ConversationTracker
from deltaguard.tools.evaluate import (
    EvalResult,
    Labelled,
    dismissed_categories,
    labelled_categories,
    measure,
    scores_of_turns,
)
from deltaguard.tools.replay import replay_delta
from deltaguard.transcripts import parse_conversation


def recorded_scores_fit(rec: RecordedTranscript, scorer: Scorer) -> bool:
    """The recording was scored by these classifiers and kept every turn's scores."""
    return (
        rec.classifier_versions == scorer.versions
        and len(rec.verdicts) == len(rec.transcript.get("turns", []))
        and all(isinstance(row.get("category_scores"), dict) for row in rec.verdicts)
    )


def calibrate(store_path: Path, scorer: Scorer, target_fpr: float = 0.01) -> EvalResult:
    """Evaluate the reviewed recordings of `store_path` (which must exist)."""
    source = str(store_path)
    with TranscriptStore(store_path).open(create=False) as store:
        recordings = store.read(tenant="*")
        marks = store.labels([r.id for r in recordings])
    reviewed = [r for r in recordings if is_reviewed(r, marks.get(r.id, {}))]
    labelled: list[Labelled] = []
    errors: list[TranscriptError] = []
    tracker = ConversationTracker(scorer)
    replayed: list[RecordedTranscript] = []

    def flagged_now(row: dict[str, Any]) -> list[str]:  # under the policy given, not the recorded one
        return scorer.policy.flagged(row["category_scores"])

    for rec in reviewed:
        line = labelled_line(rec, marks[rec.id])
        try:
            conversation = parse_conversation(line, source, rec.id)
            label = labelled_categories(conversation, source)
        except TranscriptError as exc:
            errors.append(exc)
            continue
        assert label is not None  # a labelled line always carries categories
        if recorded_scores_fit(rec, scorer):
            scores, caught = scores_of_turns(rec.verdicts, flagged_now)
        else:
            replayed.append(rec)
            scores, caught = scores_of_turns(replay_delta(conversation, tracker), _flagged)
        labelled.append(
            Labelled(conversation.id, label[0], label[1], scores, caught, dismissed_categories(conversation))
        )
    result = measure(
        labelled,
        errors,
        scorer.policy,
        target_fpr,
        f"{store_path}: no reviewed recording ({len(recordings)} not reviewed): mark each flag confirmed or "
        "false positive on the review page (deltaguard review) first",
    )
    result.unlabelled = len(recordings) - len(reviewed)
    result.scores_from = {"recorded": len(labelled) - len(replayed), "replayed": len(replayed)}
    result.notes = fallback_notes(replayed)
    return result


def _flagged(row: dict[str, Any]) -> list[str]:
    return row["flagged_categories"]


def fallback_notes(replayed: list[RecordedTranscript]) -> list[str]:
    """What the reader must know about recordings whose transcript had to be replayed."""
    if not replayed:
        return []
    notes = [
        f"{len(replayed)} recording(s) were scored by other classifier versions (or kept no scores) "
        "and were replayed with the current ones"
    ]
    redacted = [r for r in replayed if r.redacted and r.redactions.get("categories")]
    if redacted:
        lost = sorted({c for r in redacted for c in r.redactions.get("categories", [])})
        notes.append(
            f"{len(redacted)} of them are redacted: their {', '.join(lost)} values are masked, so the "
            f"replay cannot find them again and {', '.join(lost)} are measured low on them "
            "(record with --record-no-redact, or calibrate with the classifiers that recorded them)"
        )
    return notes
