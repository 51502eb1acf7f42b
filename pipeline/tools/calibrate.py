"""`deltaguard calibrate STORE`: `deltaguard eval` on recorded traffic and its review labels.

The reviewed recordings of the store (every flagged category marked confirmed or false
positive on the review page) become labelled conversations (`deltaguard.recording.labels`)
and go through the same path as a labelled file (`evaluate_conversations`): the same
report, curves and policy file. Recordings with a flag left unmarked are left out and
counted (`unlabelled` in the report).

What the numbers mean: the store holds only conversations that were flagged, so the
negatives are the false positives the reviewers found, not the benign traffic that was
never flagged; a threshold chosen here meets the target rate on flagged traffic. Redacted
recordings no longer carry their secret and PII values, so those categories cannot be
found again on replay: calibrate them on a store recorded with `--record-no-redact`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from deltaguard.errors import TranscriptError
from deltaguard.recording import TranscriptStore
from deltaguard.recording.labels import reviewed_lines
from deltaguard.state.scoring import Scorer
from deltaguard.tools.evaluate import EvalResult, evaluate_conversations
from deltaguard.transcripts import Conversation, parse_conversation


def calibrate(store_path: Path, scorer: Scorer, target_fpr: float = 0.01) -> EvalResult:
    """Evaluate the reviewed recordings of `store_path` (which must exist)."""
    with TranscriptStore(store_path).open(create=False) as store:
        lines, left_out = reviewed_lines(store)
    source = str(store_path)

    def entries() -> Iterator[Conversation | TranscriptError]:
        for n, line in enumerate(lines, start=1):
            try:
                yield parse_conversation(line, source, n)
            except TranscriptError as exc:
                yield exc

    result = evaluate_conversations(
        entries(),
        scorer,
        target_fpr,
        source,
        f"{store_path}: no reviewed recording ({left_out} not reviewed): mark each flag confirmed or "
        "false positive on the review page (deltaguard review) first",
    )
    result.unlabelled = left_out
    return result
