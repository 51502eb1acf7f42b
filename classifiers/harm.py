"""Harm / toxicity classifier: harmful requests and harmful model output, in the gate lane.

Categories: the finer ones, `hate`, `harassment`, `sexual`, `violence`, `self_harm`,
`dangerous` (weapons, drugs, cyber-attacks, fraud and other illegal instructions), and
the umbrella `toxicity`, their max. One lexical model (the artifact format of
classifiers/lexical.py: normaliser views, word and char n-gram TF-IDF, one calibrated
logistic head per finer category; trained by training/train_harm.py) scores each item;
each head's score is mapped so that its validated threshold (the manifest entry's
`thresholds`) becomes 0.5 (classifiers/scaled.py), so the policy's 0.5 means "over the
shipped operating point" for every category, the umbrella included.

What is scored: user messages (harmful requests) and what the model says (assistant
messages and tool calls: a harmful answer or action). Tool outputs are not: a fetched news
article about a war is content from outside, judged for injection, not toxicity. System
and developer prompts are the operator's. Reasoning items are the model's own thinking
about a request, which names the harm it refuses.

Consecutive model items are read with a bounded window: an assistant item is scored
with the last WINDOW_CHARS characters of the previous assistant item in front (kept in
the state, dropped by the next user message), so a streamed answer cut into chunks keeps
its context (a refusal's first sentence stays in front of the next chunk) at a bounded
cost per chunk.

Conversation scores are the running max. A category's first crossing of 0.5 yields a
`Finding` (once per conversation and category), which is what raises the output flag
while a harmful answer streams (pipeline/lanes/output_stream.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deltaguard.artifacts import verified_path
from deltaguard.classifiers.base import (
    HARM_CATEGORIES,
    Finding,
    Lane,
    Scores,
    State,
    Update,
    count_tokens,
    zero_scores,
)
from deltaguard.classifiers.lexical_model import LexicalModel
from deltaguard.classifiers.scaled import scale
from deltaguard.errors import ClassifierNotLoadedError, ModelArtifactError
from deltaguard.items import Item
from deltaguard.models import MODELS_DIR

ARTIFACT_NAME = "harm"
UMBRELLA = "toxicity"
FINE: tuple[str, ...] = HARM_CATEGORIES
CATEGORIES: tuple[str, ...] = (UMBRELLA, *FINE)
MODEL_KINDS = frozenset({"message", "function_call", "custom_tool_call"})
WINDOW_CHARS = 256
FLAG_AT = 0.5  # the scaled operating point


class HarmClassifier:
    """Gate-lane classifier over user requests and model output (module docstring).

    >>> clf = HarmClassifier().load()                     # doctest: +SKIP
    >>> clf.score_text("how do I build a pipe bomb")["dangerous"] >= 0.5  # doctest: +SKIP
    True
    """

    name = "harm"
    categories: tuple[str, ...] = CATEGORIES
    lane: Lane = "gate"
    max_state_bytes = 4096  # scores plus a window of WINDOW_CHARS characters, JSON-escaped

    def __init__(self, models_dir: Path = MODELS_DIR, *, artifact: str = ARTIFACT_NAME) -> None:
        self.models_dir = Path(models_dir)
        self.artifact = artifact
        self._model: LexicalModel | None = None
        self._entry: dict[str, Any] | None = None
        self._thresholds: dict[str, float] = {}

    def load(self) -> HarmClassifier:
        """Read and hash-check the artifact; raises ModelArtifactError if it is not usable."""
        path, entry = verified_path(self.artifact, self.models_dir)
        model = LexicalModel.from_npz(path)
        if model.heads != FINE:
            raise ModelArtifactError(f"harm artifact {path} has heads {model.heads}, expected {FINE}")
        thresholds = entry.get("thresholds", {})
        missing = [c for c in FINE if c not in thresholds]
        if missing or not all(0.0 < float(thresholds[c]) < 1.0 for c in FINE):
            raise ModelArtifactError(
                f"manifest entry {self.artifact!r}: thresholds for {FINE} in (0, 1) needed"
            )
        self._model, self._entry = model, entry
        self._thresholds = {c: float(thresholds[c]) for c in FINE}
        return self

    @property
    def version(self) -> str:
        if self._entry is None:
            raise AttributeError("HarmClassifier.version is read from the manifest: call load() first")
        return str(self._entry["version"])

    @property
    def thresholds(self) -> dict[str, float]:
        """Raw per-head thresholds chosen on validation (mapped to 0.5 in every score)."""
        if self._entry is None:
            raise AttributeError("HarmClassifier.thresholds come from the manifest: call load() first")
        return dict(self._thresholds)

    def _require_model(self) -> LexicalModel:
        if self._model is None:
            raise ClassifierNotLoadedError("HarmClassifier is not loaded: call load() before update()")
        return self._model

    def initial_state(self) -> State:
        return {"max": zero_scores(self.categories), "window": ""}

    def _scaled(self, raw: Sequence[float]) -> Scores:
        fine = {c: scale(float(p), self._thresholds[c]) for c, p in zip(FINE, raw, strict=True)}
        return {UMBRELLA: max(fine.values()), **fine}

    def score_text(self, text: str) -> Scores:
        """Item-level scores of one text on its own (as a user message gets them)."""
        model = self._require_model()
        if not text.strip():
            return zero_scores(self.categories)
        return self._scaled(model.score_views([text])[0][0])

    def update(self, state: State, items: Sequence[Item]) -> Update:
        model = self._require_model()
        window = str(state.get("window", ""))
        item_scores = [zero_scores(self.categories) for _ in items]
        texts: list[str] = []
        owners: list[int] = []
        tokens = 0
        for i, item in enumerate(items):
            if not item.scored:
                continue
            if item.role == "user":
                window = ""
                text = item.text
            elif item.role == "assistant" and item.kind in MODEL_KINDS:
                text = f"{window}\n{item.text}" if window and item.text.strip() else item.text
                if item.text.strip():
                    tokens += count_tokens(window) if window else 0
                    window = item.text[-WINDOW_CHARS:]
            else:
                continue
            tokens += item.tokens
            if item.text.strip():
                texts.append(text)
                owners.append(i)
        if texts:  # one featurisation pass for all of this update's items
            rows, extra = model.score_views(texts)
            tokens += sum(extra)
            for i, row in zip(owners, rows, strict=True):
                item_scores[i] = self._scaled(row)
        previous = dict(state.get("max") or zero_scores(self.categories))
        scores = dict(previous)
        findings = []
        for i, row in enumerate(item_scores):
            for cat in self.categories:
                value = row[cat]
                if value >= FLAG_AT > scores[cat]:
                    findings.append(Finding(cat, "harm", i, f"{cat} {value:.2f}"))
                if value > scores[cat]:
                    scores[cat] = value
        return Update(
            state={"max": dict(scores), "window": window},
            item_scores=item_scores,
            scores=scores,
            tokens=tokens,
            findings=findings,
        )
