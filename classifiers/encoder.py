"""Sentence-encoder classifier: all-MiniLM-L6-v2 on onnxruntime + logistic-regression heads.

Built by `python -m models.train_encoder` (torch and transformers are build-time tools
only); served here with numpy, onnxruntime and the `tokenizers` library. The manifest
entry "encoder" lists three hash-checked files:

    model       int8 ONNX encoder: input_ids, attention_mask, token_type_ids ->
                last_hidden_state. Weights are per-channel int8; activations are
                quantized per token (one scale per row of each MatMul input), so a
                window's embedding never depends on the other windows of its batch
                or on padding (see models/README.md for the measurements).
    tokenizer   the model's tokenizer.json (Rust fast tokenizer, BERT uncased)
    heads       npz (no pickle): `heads` names, `coef` (heads x 384) and `intercept`,
                Platt calibration folded in, applied to mean-pooled, L2-normalised
                window embeddings.

Each scored item is tokenized once. Its token ids are cut into windows of at most
`WINDOW_TOKENS` (with [CLS]/[SEP]) that overlap by `WINDOW_TOKENS - 2 - WINDOW_STRIDE`;
the item's score per head is the max over its windows, because an injection anywhere
in a tool output is an injection. An item that fits in one window also sees the last
`CONTEXT_TOKENS` ids of the previous scored item (kept in the state, so history is
never re-tokenized): they take part in attention but not in the pooled mean, so the
item's score stays its own evidence. Assistant items get zeros and leave the context
alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from classifiers.base import Lane, Scores, State, Update, running_max, zero_scores
from models import MODELS_DIR
from pipeline.artifacts import manifest_entry, sha256_file
from pipeline.errors import ModelArtifactError
from pipeline.items import Item

ARTIFACT_NAME = "encoder"
FORMAT_VERSION = 1
ARTIFACT_FILES = ("model", "tokenizer", "heads")
WINDOW_TOKENS = 256  # the model's max_seq_length in sentence-transformers, [CLS] and [SEP] included
WINDOW_STRIDE = 192  # content tokens between window starts: 62 tokens of overlap
CONTEXT_TOKENS = 16  # tail of the previous scored item that the next item's first window attends to
BATCH_WINDOWS = 32  # windows per onnxruntime call
MAX_ITEM_WINDOWS = 128  # per item (~24k tokens); longer items are sampled evenly, see _window_starts
SCORED_ROLES = frozenset({"user", "system", "developer", "tool"})
EMBEDDING_DIM = 384


class EncoderNotLoadedError(RuntimeError):
    """`update` was called on an EncoderClassifier whose `load()` has not run."""


@dataclass(frozen=True, slots=True)
class Window:
    """Model input for one window: `[CLS] context content [SEP]`, pooled over all but context."""

    ids: np.ndarray  # int64, [CLS] ... [SEP]
    context: int  # number of context ids right after [CLS], excluded from pooling


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _window_starts(n_ids: int, content: int, stride: int, max_windows: int | None) -> list[int]:
    """Start offsets of the windows over `n_ids` content ids.

    Every id is covered, consecutive windows overlap by `content - stride`. Past
    `max_windows`, the same number of windows is spread evenly over the item (first and
    last included): cost stays bounded, and coverage of very long items is sampled.
    """
    if n_ids <= content:
        return [0]
    n = math.ceil((n_ids - content) / stride) + 1
    last = n_ids - content
    if max_windows is None or n <= max_windows:
        return [min(i * stride, last) for i in range(n)]
    if max_windows == 1:
        return [0]
    return [round(i * last / (max_windows - 1)) for i in range(max_windows)]


class EncoderModel:
    """Tokenizer, onnxruntime session and heads: text -> windows -> per-head probabilities."""

    def __init__(
        self, tokenizer: Any, session: Any, heads: tuple[str, ...], coef: np.ndarray, intercept: np.ndarray
    ) -> None:
        self.tokenizer = tokenizer
        self.session = session
        self.heads = heads
        self.coef = coef
        self.intercept = intercept
        self.cls_id = self._special_id("[CLS]")
        self.sep_id = self._special_id("[SEP]")

    @classmethod
    def from_files(cls, model: Path, tokenizer: Path, heads: Path, threads: int = 1) -> EncoderModel:
        return cls(_load_tokenizer(tokenizer), _load_session(model, threads), *_load_heads(heads))

    def _special_id(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise ModelArtifactError(f"encoder tokenizer has no {token} token")
        return int(found)

    def tokenize(self, text: str) -> list[int]:
        """Content ids of `text` (no special tokens, no truncation)."""
        try:
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        except (TypeError, UnicodeEncodeError):
            # Lone surrogates cannot cross into Rust: replace them, as a UTF-8 decoder would.
            clean = text.encode("utf-8", "replace").decode("utf-8")
            return self.tokenizer.encode(clean, add_special_tokens=False).ids

    def windows(self, ids: Sequence[int], context: Sequence[int], max_windows: int | None) -> list[Window]:
        """The windows of one item's content ids; the first one carries `context`."""
        content = WINDOW_TOKENS - 2
        first_content = content - len(context)
        out = []
        if len(ids) <= first_content:
            return [self._window(context, ids)]
        for start in _window_starts(len(ids), content, WINDOW_STRIDE, max_windows):
            out.append(self._window((), ids[start : start + content]))
        return out

    def _window(self, context: Sequence[int], content: Sequence[int]) -> Window:
        ids = np.empty(len(context) + len(content) + 2, dtype=np.int64)
        ids[0], ids[-1] = self.cls_id, self.sep_id
        ids[1 : 1 + len(context)] = context
        ids[1 + len(context) : -1] = content
        return Window(ids=ids, context=len(context))

    def embed(self, windows: Sequence[Window], batch: int = BATCH_WINDOWS) -> np.ndarray:
        """Mean-pooled, L2-normalised embeddings (len(windows) x 384).

        Windows are sorted by length and run `batch` at a time to limit padding; the
        per-token quantization makes each row independent of its batch.
        """
        out = np.empty((len(windows), EMBEDDING_DIM), dtype=np.float32)
        order = sorted(range(len(windows)), key=lambda i: len(windows[i].ids))
        for lo in range(0, len(order), batch):
            chunk = [windows[i] for i in order[lo : lo + batch]]
            feed, pool = batch_inputs(chunk)
            hidden = self.run(feed)
            out[order[lo : lo + batch]] = pooled(hidden, pool)
        return out

    def run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        try:
            return self.session.run(["last_hidden_state"], feed)[0]
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ModelArtifactError(f"encoder model failed to run: {exc}") from exc

    def score_texts(self, texts: Sequence[str], max_windows: int | None = MAX_ITEM_WINDOWS) -> np.ndarray:
        """Item-level probabilities (texts x heads) of standalone texts: max over windows."""
        windows: list[Window] = []
        spans = []
        for text in texts:
            lo = len(windows)
            ids = self.tokenize(text)
            if ids:
                windows.extend(self.windows(ids, (), max_windows))
            spans.append((lo, len(windows)))
        probs = self.head_probabilities(self.embed(windows)) if windows else np.zeros((0, len(self.heads)))
        out = np.zeros((len(texts), len(self.heads)))
        for row, (lo, hi) in enumerate(spans):
            if hi > lo:
                out[row] = probs[lo:hi].max(axis=0)
        return out

    def head_probabilities(self, embeddings: np.ndarray) -> np.ndarray:
        """Calibrated probability per window and head (windows x heads)."""
        return _sigmoid(embeddings.astype(np.float64) @ self.coef.T + self.intercept)


def batch_inputs(windows: Sequence[Window]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The onnxruntime feed for `windows` (right-padded) and the pooling mask."""
    length = max(len(w.ids) for w in windows)
    ids = np.zeros((len(windows), length), dtype=np.int64)
    mask = np.zeros_like(ids)
    pool = np.zeros((len(windows), length), dtype=np.float32)
    for row, w in enumerate(windows):
        n = len(w.ids)
        ids[row, :n] = w.ids
        mask[row, :n] = 1
        pool[row, :n] = 1.0
        pool[row, 1 : 1 + w.context] = 0.0
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return feed, pool


def pooled(hidden: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Masked mean over tokens, then L2 normalisation (as sentence-transformers does)."""
    sums = np.einsum("bld,bl->bd", hidden, pool)
    means = sums / pool.sum(axis=1, keepdims=True)
    norms = np.linalg.norm(means, axis=1, keepdims=True)
    return means / np.maximum(norms, 1e-12)


def _load_tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception on a bad file
        raise ModelArtifactError(f"cannot read encoder tokenizer {path}: {exc}") from exc
    # tokenizer.json ships with truncation to 128 and fixed padding: windows are ours.
    tok.no_truncation()
    tok.no_padding()
    return tok


def _load_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's errors have no common base class
        raise ModelArtifactError(f"cannot load encoder model {path}: {exc}") from exc


def _load_heads(path: Path) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            if int(npz["format_version"]) != FORMAT_VERSION:
                raise ValueError(f"format_version {int(npz['format_version'])} != {FORMAT_VERSION}")
            heads = tuple(str(h) for h in npz["heads"])
            coef = np.asarray(npz["coef"], dtype=np.float64)
            intercept = np.asarray(npz["intercept"], dtype=np.float64)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelArtifactError(f"cannot read encoder heads {path}: {exc}") from exc
    if not heads or coef.shape != (len(heads), EMBEDDING_DIM) or intercept.shape != (len(heads),):
        raise ModelArtifactError(f"encoder heads {path}: coef {coef.shape} / intercept {intercept.shape}")
    return heads, coef, intercept


def verified_files(models_dir: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    """The entry's files after checking each sha256 against the manifest."""
    entry = manifest_entry(ARTIFACT_NAME, models_dir)
    paths = {}
    for role in ARTIFACT_FILES:
        spec = entry.get("files", {}).get(role)
        if spec is None:
            raise ModelArtifactError(f"model {ARTIFACT_NAME!r}: manifest lists no {role!r} file")
        path = models_dir / spec["file"]
        if not path.is_file():
            raise ModelArtifactError(f"model {ARTIFACT_NAME!r}: artifact {path} is missing")
        actual = sha256_file(path)
        if actual != spec["sha256"]:
            raise ModelArtifactError(
                f"model {ARTIFACT_NAME!r}: artifact {path} has sha256 {actual}, "
                f"manifest says {spec['sha256']}"
            )
        paths[role] = path
    return paths, entry


@dataclass(slots=True)
class _Plan:
    """One request's items, with the window range of each scored item."""

    spans: list[tuple[int, int] | None]  # per item: [lo, hi) into the batch's windows
    context: list[int]  # the state's context after the request


class EncoderClassifier:
    """Monitor-lane classifier: MiniLM embeddings + calibrated heads, conversation score = running max.

    >>> clf = EncoderClassifier().load()                                 # doctest: +SKIP
    >>> upd = clf.update(clf.initial_state(), [parse_item({"role": "user", "content": "hi"})])
    """

    name = "encoder"
    lane: Lane = "monitor"
    max_state_bytes = 512

    def __init__(
        self, models_dir: Path = MODELS_DIR, threads: int = 1, max_item_windows: int | None = MAX_ITEM_WINDOWS
    ) -> None:
        self.models_dir = Path(models_dir)
        self.threads = threads
        self.max_item_windows = max_item_windows
        self._model: EncoderModel | None = None
        self._entry: dict[str, Any] | None = None

    def load(self) -> EncoderClassifier:
        """Hash-check the artifacts and create the onnxruntime session (once)."""
        paths, entry = verified_files(self.models_dir)
        model = EncoderModel.from_files(paths["model"], paths["tokenizer"], paths["heads"], self.threads)
        if list(model.heads) != list(entry.get("categories", model.heads)):
            raise ModelArtifactError(f"encoder heads {model.heads} differ from the manifest's categories")
        self._model, self._entry = model, entry
        return self

    def _loaded_entry(self, what: str) -> dict[str, Any]:
        if self._entry is None:
            raise AttributeError(f"EncoderClassifier.{what} is read from the artifacts: call load() first")
        return self._entry

    @property
    def version(self) -> str:
        return str(self._loaded_entry("version")["version"])

    @property
    def categories(self) -> tuple[str, ...]:
        self._loaded_entry("categories")
        assert self._model is not None
        return self._model.heads

    @property
    def thresholds(self) -> dict[str, float]:
        """Per-head decision thresholds chosen on validation (see models/README.md)."""
        return {h: float(t) for h, t in self._loaded_entry("thresholds")["thresholds"].items()}

    @property
    def model(self) -> EncoderModel:
        if self._model is None:
            raise EncoderNotLoadedError("EncoderClassifier is not loaded: call load() before update()")
        return self._model

    def initial_state(self) -> State:
        return {"max": zero_scores(self.categories), "context": []}

    def update(self, state: State, items: Sequence[Item]) -> Update:
        return self.update_batch([(state, items)])[0]

    def update_batch(self, requests: Sequence[tuple[State, Sequence[Item]]]) -> list[Update]:
        """Score several conversations' new items with shared onnxruntime calls.

        Returns exactly what `update(state, items)` returns for each request.
        """
        model = self.model
        windows: list[Window] = []
        plans = [self._plan(model, state, items, windows) for state, items in requests]
        probs = model.head_probabilities(model.embed(windows)) if windows else np.zeros((0, 0))
        return [
            self._finish(state, plan, probs, windows)
            for (state, _items), plan in zip(requests, plans, strict=True)
        ]

    def _plan(self, model: EncoderModel, state: State, items: Sequence[Item], windows: list[Window]) -> _Plan:
        """Tokenize the request's scored items once and append their windows."""
        context = [int(i) for i in state.get("context", [])][-CONTEXT_TOKENS:]
        spans: list[tuple[int, int] | None] = []
        for item in items:
            ids = model.tokenize(item.text) if item.scored and item.role in SCORED_ROLES else []
            if not ids:
                spans.append(None)
                continue
            lo = len(windows)
            windows.extend(model.windows(ids, context if CONTEXT_TOKENS else (), self.max_item_windows))
            spans.append((lo, len(windows)))
            context = ids[-CONTEXT_TOKENS:] if CONTEXT_TOKENS else []
        return _Plan(spans=spans, context=context)

    def _finish(self, state: State, plan: _Plan, probs: np.ndarray, windows: Sequence[Window]) -> Update:
        cats = self.categories
        item_scores: list[Scores] = []
        tokens = 0
        for span in plan.spans:
            if span is None:
                item_scores.append(zero_scores(cats))
                continue
            lo, hi = span
            best = probs[lo:hi].max(axis=0)
            item_scores.append({c: float(p) for c, p in zip(cats, best, strict=True)})
            tokens += sum(len(w.ids) for w in windows[lo:hi])
        previous = state.get("max") or zero_scores(cats)
        scores = running_max(previous, item_scores)
        new_state = {"max": dict(scores), "context": list(plan.context)}
        return Update(state=new_state, item_scores=item_scores, scores=scores, tokens=tokens)
