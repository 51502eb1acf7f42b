"""Recording flagged conversations, for audit and for replay with another policy or model.

When the safety stage emits a flag event (gate, monitor or output lane; an output flag
once the post-inference lane has scored the whole output), it hands the event and
the turn's `ResponseRecord` to a `TranscriptRecorder`. The recorder works off the
response path (a bounded queue and one writer thread, like the sinks) and stores:

- the transcript up to and including the flagged turn, as one line of transcript
  format v1 (docs/contract.md section 1), so `deltaguard replay` reads it back; secrets and
  PII values replaced by `[REDACTED:<kind>]` when redaction is on;
- the verdict of every turn (the `deltaguard replay --json` turn shape), computed
  with the live scorer and policy over the items as they were before redaction: what
  the pipeline decided, and what `deltaguard replay --from-store --diff` compares with;
- the flag events themselves, the classifier versions and the policy in force.

Its modules, bottom to top:

    redaction   secret and PII values found in items and replaced by a marker
    schema      the SQLite file's tables and versions, and the connection that opens it
    store       the SQLite file (`TranscriptStore`): recordings, retention and review labels
    recorder    `TranscriptRecorder`: one recording per flagged branch, off the response path
    labels      reviewed recordings as labelled transcript lines (`deltaguard eval`, `calibrate`)
"""

from __future__ import annotations

from deltaguard.recording.recorder import Outcome, TranscriptRecorder, split_turn
from deltaguard.recording.redaction import Redactions, Span, find_sensitive, redact_items
from deltaguard.recording.schema import REVIEW_VERDICTS, SCHEMA_VERSION
from deltaguard.recording.store import RecordedTranscript, TranscriptStore, read_recorded

__all__ = [
    "REVIEW_VERDICTS",
    "SCHEMA_VERSION",
    "Outcome",
    "RecordedTranscript",
    "Redactions",
    "Span",
    "TranscriptRecorder",
    "TranscriptStore",
    "find_sensitive",
    "read_recorded",
    "redact_items",
    "split_turn",
]
