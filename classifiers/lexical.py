"""Lexical prompt-injection / jailbreak classifier: the lexical model (lexical_model.py)
as a gate-lane classifier.

By default only what users and tools say is scored. System and developer messages come
from the application's operator, and the model can flag ordinary "You are a helpful ..."
prompts (see models/README.md), so they are scored only when asked for with `roles`;
the default pipeline judges them for jailbreaks only, with the operator view
(classifiers/operator.py). The assistant's own messages and function calls always get
zero. Files attached to a message (`Item.attachments`) are untrusted content: the view
that scores tool outputs scores them too, and the item takes the max. The extra
normalised view's tokens are added to the update's `tokens`.

Untrusted text (tool outputs, attached files) is read piece by piece as well as whole by
an artifact trained that way (lexical-v5 and later), cut as the entry's `reading` says
(classifiers/segments.py; 1 when it does not say, and the version reads "+readingN" for
reading N > 1, whose operating points the recipe checked for it). A piece over its head's
threshold is reported as a located finding (item, start, end, score), and an artifact with
`untrusted_thresholds` judges untrusted text at thresholds of its own, reporting its
scores on the category thresholds' scale (classifiers/scaled.py `rescale`). Untrusted text
is judged for injection only: a jailbreak is a principal's act (base.PRINCIPAL_ONLY).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from deltaguard.artifacts import verified_path
from deltaguard.classifiers.base import (
    PRINCIPAL_ONLY,
    Finding,
    Lane,
    Scores,
    State,
    Update,
    count_tokens,
    max_update,
    zero_scores,
)
from deltaguard.classifiers.lexical_model import (
    LexicalModel,
    Span,
)
from deltaguard.classifiers.scaled import rescale_one
from deltaguard.classifiers.segments import READINGS
from deltaguard.errors import LexicalNotLoadedError, ModelArtifactError
from deltaguard.items import Item
from deltaguard.models import MODELS_DIR

ARTIFACT_NAME = "lexical"
SCORED_ROLES = frozenset({"user", "tool"})
UNTRUSTED = "tool"  # the role of content from outside the conversation


def shared_model(lexical: LexicalClassifier | None, entry: Mapping[str, Any]) -> LexicalModel | None:
    """The model `lexical` has loaded when it is the artifact manifest `entry` names (same
    sha256), so a view with its own entry shares it; None when it is not (or not loaded),
    and the view loads its own copy: a threshold never serves another artifact."""
    lexical_entry = getattr(lexical, "_entry", None)  # set by LexicalClassifier.load()
    if lexical is None or not lexical_entry or lexical_entry.get("sha256") != entry.get("sha256"):
        return None
    return lexical._require_model()


class LexicalClassifier:
    """Gate-lane classifier: per-item lexical scores, conversation score = running max."""

    name = "lexical"
    categories: tuple[str, ...] = ("prompt_injection", "jailbreak")
    lane: Lane = "gate"
    max_state_bytes = 256

    def __init__(
        self,
        models_dir: Path = MODELS_DIR,
        *,
        roles: Collection[str] = SCORED_ROLES,
        artifact: str = ARTIFACT_NAME,
        min_chars: Mapping[str, int] | None = None,
        reading: int | None = None,
    ) -> None:
        """`roles`: item roles that are scored, by default user and tool. System and
        developer prompts come from the application's operator and the model flags
        benign "You are a ... assistant" prompts (no such negatives exist in the training
        data, see models/README.md); pass e.g. roles={"user", "tool", "system",
        "developer"} to score them anyway. `artifact`: the manifest entry to serve.
        `min_chars`: per role, the shortest text this view scores (the registry leaves
        short user messages to the conversation view). `reading`: how untrusted text is cut
        (classifiers/segments.py), if not the entry's (to measure an earlier release)."""
        self.models_dir = Path(models_dir)
        self.artifact = artifact
        self.roles = frozenset(roles)
        self.min_chars = dict(min_chars or {})
        self._reading = reading
        self._model: LexicalModel | None = None
        self._entry: dict[str, Any] | None = None
        self._thresholds: dict[str, float] = {}
        self._untrusted_thresholds: dict[str, float] = {}

    def load(self) -> LexicalClassifier:
        """Read and hash-check the artifact; raises ModelArtifactError if it is not usable."""
        path, entry = verified_path(self.artifact, self.models_dir)
        model = LexicalModel.from_npz(path)
        self._reading_of(entry)
        if model.heads != self.categories:
            raise ModelArtifactError(
                f"lexical artifact {path} has heads {model.heads}, expected {self.categories}"
            )
        self._serve(model, entry)
        return self

    def share(self, loaded: LexicalClassifier | None) -> LexicalClassifier:
        """Serve the model `loaded` already holds (no second copy in memory), or load it
        when `loaded` is None; this instance keeps its own `roles`."""
        if loaded is None:
            return self.load()
        self._reading_of(loaded._entry or {})
        self._serve(loaded._require_model(), loaded._entry or {})
        return self

    def _serve(self, model: LexicalModel, entry: dict[str, Any]) -> None:
        self._model, self._entry = model, entry
        # Read once here, not per update: the gate lane pays for every microsecond.
        self._thresholds = {head: float(t) for head, t in entry["thresholds"].items()}
        own = entry.get("untrusted_thresholds") or {}
        self._untrusted_thresholds = {head: float(t) for head, t in own.items()}

    @property
    def version(self) -> str:
        if self._entry is None:
            raise AttributeError("LexicalClassifier.version is read from the manifest: call load() first")
        version = str(self._entry["version"])
        return version if self.reading == 1 else f"{version}+reading{self.reading}"

    @property
    def reading(self) -> int:
        """How untrusted text is cut into pieces (classifiers/segments.py `pieces`)."""
        return self._reading_of(self._entry or {})

    def _reading_of(self, entry: Mapping[str, Any]) -> int:
        """The reading that serves `entry`: the constructor's, else the entry's (1 when it
        does not say); ModelArtifactError for one segments.py does not know."""
        reading = self._reading if self._reading is not None else entry.get("reading", 1)
        if reading not in READINGS:
            raise ModelArtifactError(
                f"lexical entry {self.artifact!r}: reading {reading!r} is not one of {READINGS}"
            )
        return reading

    @property
    def thresholds(self) -> dict[str, float]:
        """Per-head decision thresholds chosen on validation (see models/README.md)."""
        if self._entry is None:
            raise AttributeError("LexicalClassifier.thresholds come from the manifest: call load() first")
        return dict(self._thresholds)

    def _require_model(self) -> LexicalModel:
        if self._model is None:
            raise LexicalNotLoadedError("LexicalClassifier is not loaded: call load() before update()")
        return self._model

    def initial_state(self) -> State:
        return {"max": zero_scores(self.categories)}

    def score_text(self, text: str, *, untrusted: bool = False) -> Scores:
        """Item-level scores for one text as a user's message gets them, or with
        `untrusted` as a tool output does (read piece by piece too, on the same scale)."""
        return self.score_text_counted(text, untrusted=untrusted)[0]

    def score_text_counted(self, text: str, *, untrusted: bool = False) -> tuple[Scores, int]:
        """`score_text`, and the tokens of the text's extra normalised view (0 if none)."""
        model = self._require_model()
        if not text.strip():
            return zero_scores(self.categories), 0
        if untrusted:
            rows, extra, _where = model.score_located([text], self.reading)
            row = self._as_untrusted(rows.tolist()[0])
        else:
            rows, extra = model.score_views([text])
            row = rows.tolist()[0]
        return dict(zip(self.categories, row, strict=True)), extra[0]

    def update(self, state: State, items: Sequence[Item]) -> Update:
        model = self._require_model()
        item_scores = [zero_scores(self.categories) for _ in items]
        tokens = 0
        trusted: list[tuple[int, str]] = []  # (item, text)
        untrusted: list[tuple[int, str, str]] = []  # (item, text, kind of finding)
        for i, item in enumerate(items):
            if item.scored and self._reads(item):
                tokens += item.tokens  # counted once, when the item was parsed
                if item.text.strip():
                    if item.role == UNTRUSTED:
                        untrusted.append((i, item.text, self.name))
                    else:
                        trusted.append((i, item.text))
        # Files attached to a message are untrusted content whoever attached them: judged
        # with tool outputs, by the view that judges those.
        if UNTRUSTED in self.roles:
            for i, item in enumerate(items):
                if item.attachments.strip():
                    untrusted.append((i, item.attachments, f"{self.name}/attachment"))
                    tokens += count_tokens(item.attachments)
        findings: list[Finding] = []
        if trusted:  # one featurisation pass per kind of channel
            owners, texts = zip(*trusted, strict=True)
            rows, extra = model.score_views(texts)
            tokens += sum(extra)  # the normaliser's extra views are work too
            self._merge(item_scores, owners, rows.tolist())
        if untrusted:
            owners, texts, kinds = zip(*untrusted, strict=True)
            located, extra, where = model.score_located(texts, self.reading)
            untrusted_rows = [self._as_untrusted(row) for row in located.tolist()]
            tokens += sum(extra)
            self._merge(item_scores, owners, untrusted_rows)
            findings = self._findings(owners, kinds, texts, untrusted_rows, where)
        return max_update(state, self.categories, item_scores, tokens, findings)

    def _reads(self, item: Item) -> bool:
        return item.role in self.roles and len(item.text) >= self.min_chars.get(item.role, 0)

    def _as_untrusted(self, row: list[float]) -> list[float]:
        """Untrusted text's scores: zero for what only a principal can be guilty of
        (base.PRINCIPAL_ONLY), the rest expressed on the category thresholds' scale: an
        artifact with `untrusted_thresholds` (lexical-v5 and later) judges tool outputs,
        which it also reads piece by piece, at thresholds of their own, chosen per
        conversation."""
        own = self._untrusted_thresholds
        return [
            0.0
            if head in PRINCIPAL_ONLY
            else rescale_one(p, own[head], self._thresholds[head])
            if head in own
            else p
            for head, p in zip(self.categories, row, strict=True)
        ]

    def _merge(self, item_scores: list[Scores], owners: Sequence[int], rows: Sequence[list[float]]) -> None:
        """Each row into its item's scores (an item and its attached files take the max)."""
        for i, row in zip(owners, rows, strict=True):
            own = item_scores[i]
            item_scores[i] = {head: max(own[head], p) for head, p in zip(self.categories, row, strict=True)}

    def _findings(
        self,
        owners: Sequence[int],
        kinds: Sequence[str],
        texts: Sequence[str],
        rows: Sequence[list[float]],
        where: Sequence[Sequence[Span | None]],
    ) -> list[Finding]:
        """Where a piece of untrusted text is over its head's threshold: the piece's range
        (in the item's text, or in its attached files' text for kind ".../attachment")."""
        thresholds = self._thresholds
        out = []
        for i, kind, text, row, spans in zip(owners, kinds, texts, rows, where, strict=True):
            for head, p, span in zip(self.categories, row, spans, strict=True):
                if span is not None and p >= thresholds[head]:
                    start, end = span
                    out.append(Finding(head, kind, i, text[start:end][:60], start, end, p))
        return out
