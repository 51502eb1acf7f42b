"""Tool poisoning: prompt injection hidden in tool definitions, judged at their own threshold.

Items of role "definitions" (a request's `tools` as one `tool_definitions` item, an MCP
server's `mcp_list_tools`, `additional_tools`) carry tool names, descriptions and schema
descriptions. Those are written as instructions to the model ("Use this only when the
user asks", "Never call this on your own initiative"), so the tool-output threshold of
the lexical model flags benign ones. This view of the same lexical model scores only
that role, at the threshold the manifest's "tool-definitions" entry records, chosen on
benign and poisoned tool definitions (`python -m training.tool_definitions`).

- The item is scored in pieces and takes their max, so an injection in one of 20 tool
  descriptions is not diluted by the other 19 (TF-IDF is l2-normalised per text). The
  piece (`unit`: each string field, each tool, or the whole item) is part of the
  operating point: the recipe picks it on validation and the manifest entry records it.
- prompt_injection only. The jailbreak head flags benign imperative descriptions and no
  allowed data has jailbreaks in tool definitions; a jailbreak is typed by a user and
  judged on user text by the other views.
- Scores are 0.5-scaled (classifiers/scaled.py): 0.5 is the validated threshold, as for
  every model-backed classifier; the conversation score is their running max.
- The threshold belongs to one artifact (its sha256 is in the entry): the shared lexical
  model is used only if it is that artifact, otherwise this view loads its own copy, so a
  retrained lexical model never runs at a threshold chosen for another one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deltaguard.artifacts import manifest_entry, verified_path
from deltaguard.classifiers.base import Lane, Scores, State, Update, max_update, zero_scores
from deltaguard.classifiers.lexical import LexicalClassifier, shared_model
from deltaguard.classifiers.lexical_model import LexicalModel
from deltaguard.classifiers.scaled import scale
from deltaguard.errors import LexicalNotLoadedError, ModelArtifactError
from deltaguard.items import DEFINITIONS_ROLE, Item
from deltaguard.models import MODELS_DIR
from deltaguard.parsing import text_fields

ENTRY_NAME = "tool-definitions"
SCORED_ROLES = frozenset({DEFINITIONS_ROLE})
CATEGORY = "prompt_injection"
MIN_FIELD_WORDS = 4


UNITS = ("field", "tool", "item")


def definition_texts(item: Item, unit: str = "tool") -> list[str]:
    """The pieces of a definitions item that are scored alone (the item takes their max):
    "field", every string field of >= MIN_FIELD_WORDS words (a description, one parameter's
    description) and, per tool, its shorter strings (names, enum values) joined;
    "tool", each tool's text, then the text outside the `tools` list; "item", the whole text."""
    raw = item.raw if isinstance(item.raw, dict) else {}
    tools = raw.get("tools")
    if unit == "item" or not isinstance(tools, list) or not tools:
        return [item.text] if item.text.strip() else []
    rest = {k: v for k, v in raw.items() if k != "tools"}
    if unit == "field":  # short strings (names, enum values) are noise alone: joined per tool
        out = []
        for part in [*tools, rest]:
            fields = text_fields(part)
            out += [f for f in fields if len(f.split()) >= MIN_FIELD_WORDS]
            short = " ".join(f for f in fields if len(f.split()) < MIN_FIELD_WORDS)
            out += [short] if short.strip() else []
        return out
    pieces = ["\n".join(text_fields(tool)) for tool in tools] + ["\n".join(text_fields(rest))]
    return [p for p in pieces if p.strip()]


class DefinitionsClassifier:
    """Gate-lane classifier: per-item max over tools, conversation score = running max."""

    name = "definitions"
    categories: tuple[str, ...] = (CATEGORY,)
    lane: Lane = "gate"
    max_state_bytes = 128

    def __init__(self, models_dir: Path = MODELS_DIR, *, lexical: LexicalClassifier | None = None) -> None:
        """`lexical`: an already loaded LexicalClassifier whose model is shared when it is
        the artifact the threshold was chosen for."""
        self.models_dir = Path(models_dir)
        self.lexical = lexical
        self._model: LexicalModel | None = None
        self._entry: dict[str, Any] | None = None
        self._head = 0

    def load(self) -> DefinitionsClassifier:
        entry = manifest_entry(ENTRY_NAME, self.models_dir)
        if CATEGORY not in entry.get("thresholds", {}):
            raise ModelArtifactError(f"manifest entry {ENTRY_NAME!r} has no {CATEGORY} threshold")
        model = shared_model(self.lexical, entry)
        if model is None:
            path, _ = verified_path(ENTRY_NAME, self.models_dir)
            model = LexicalModel.from_npz(path)
        if entry.get("unit", "tool") not in UNITS:
            raise ModelArtifactError(f"{ENTRY_NAME}: unknown unit {entry.get('unit')!r}; known: {UNITS}")
        if CATEGORY not in model.heads:
            raise ModelArtifactError(f"{ENTRY_NAME}: the artifact has no {CATEGORY} head ({model.heads})")
        self._model, self._entry, self._head = model, entry, model.heads.index(CATEGORY)
        return self

    @property
    def version(self) -> str:
        if self._entry is None:
            raise AttributeError("DefinitionsClassifier.version is read from the manifest: call load() first")
        return str(self._entry["version"])

    @property
    def threshold(self) -> float:
        if self._entry is None:
            raise AttributeError("DefinitionsClassifier.threshold comes from the manifest: call load() first")
        return float(self._entry["thresholds"][CATEGORY])

    def initial_state(self) -> State:
        return {"max": zero_scores(self.categories)}

    def raw_scores(self, items: Sequence[Item]) -> tuple[list[float], int]:
        """Per item, the raw (unscaled) probability, 0 for other roles; and the tokens of
        the normaliser's extra views."""
        if self._model is None:
            raise LexicalNotLoadedError("DefinitionsClassifier is not loaded: call load() before update()")
        unit = (self._entry or {}).get("unit", "tool")
        pieces = [
            definition_texts(item, unit) if item.scored and item.role in SCORED_ROLES else []
            for item in items
        ]
        flat = [text for piece in pieces for text in piece]
        if not flat:
            return [0.0] * len(items), 0
        rows, extra = self._model.score_views(flat)
        out, at = [], 0
        for piece in pieces:
            out.append(float(rows[at : at + len(piece), self._head].max()) if piece else 0.0)
            at += len(piece)
        return out, sum(extra)

    def update(self, state: State, items: Sequence[Item]) -> Update:
        raw, extra = self.raw_scores(items)
        threshold = self.threshold
        item_scores: list[Scores] = [{CATEGORY: scale(p, threshold) if p else 0.0} for p in raw]
        tokens = extra + sum(item.tokens for item in items if item.scored and item.role in SCORED_ROLES)
        return max_update(state, self.categories, item_scores, tokens)
