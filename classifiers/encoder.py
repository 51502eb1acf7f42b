"""Sentence-encoder classifier: all-MiniLM-L6-v2 on onnxruntime + logistic-regression heads.

Built by `python -m training.train_encoder` (torch and transformers are build-time tools
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
in a tool output is an injection. With `context_tokens > 0` (off by default, see
CONTEXT_TOKENS), an item that fits in one window also sees the last `context_tokens` ids
of the previous scored item, kept in the state so history is never re-tokenized: they
take part in attention but not in the pooled mean, so the item's score stays its own
evidence. Assistant items get zeros and leave the context alone. Files attached to a
message (`Item.attachments`) are judged as a tool output is, alone and without context,
by the heads of role "tool", and the item takes the max of its own and its files' scores.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.artifacts import manifest_entry, sha256_file
from deltaguard.classifiers import normalize
from deltaguard.classifiers.base import Lane, Scores, State, Update, count_tokens, running_max, zero_scores
from deltaguard.classifiers.lexical import LexicalClassifier
from deltaguard.classifiers.scaled import scale
from deltaguard.errors import EncoderNotLoadedError, ModelArtifactError
from deltaguard.items import Item
from deltaguard.models import MODELS_DIR

ARTIFACT_NAME = "encoder"
FORMAT_VERSION = 1
ARTIFACT_FILES = ("model", "tokenizer", "heads")
WINDOW_TOKENS = 256  # the model's max_seq_length in sentence-transformers, [CLS] and [SEP] included
WINDOW_STRIDE = 192  # content tokens between window starts: 62 tokens of overlap
# Context off by default: measured on 150 held-back chitchat conversations and 300 S-Labs
# injections split over two messages, 16 context tokens raised per-message FPR from 0.83%
# to 1.26% and tokens by 48% for +1.4 points of split-injection recall (97.3% -> 98.7%).
CONTEXT_TOKENS = 0
BATCH_WINDOWS = 32  # windows per onnxruntime call, at most
# Padded tokens per onnxruntime call, at most (a longer window runs alone). Small calls
# are faster on CPU: a call's activations then stay in the core's L2 cache, and most of
# the time goes to elementwise work, not the int8 products. Measured on this 2-core box,
# one thread, ~1,000-token tool outputs: the detector 73 ms per item with 256 tokens per
# call against 90 ms with all 12 windows in one; the encoder 273 ms against 348 ms.
CALL_TOKENS = 256
PAD_SLACK = 1.15  # padded tokens per call <= 15% more than real ones
MAX_ITEM_WINDOWS = 64  # per item (~12k tokens, ~50 kB of English); longer items are sampled evenly
MEMO_ITEMS = 4096  # item results remembered (an entry is ~100 bytes)
SCORED_ROLES = frozenset({"user", "system", "developer", "tool"})
UNTRUSTED_ROLE = "tool"  # content from outside the conversation, and files attached to messages
EMBEDDING_DIM = 384


@dataclass(frozen=True, slots=True)
class WindowShape:
    """Window length (with [CLS] and [SEP]) and content tokens between window starts."""

    tokens: int = WINDOW_TOKENS
    stride: int = WINDOW_STRIDE


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
        self,
        tokenizer: Any,
        session: Any,
        heads: tuple[str, ...],
        coef: np.ndarray,
        intercept: np.ndarray,
        shape: WindowShape = WindowShape(),
    ) -> None:
        self.tokenizer = tokenizer
        self.session = session
        self.heads = heads
        self.coef = coef
        self.intercept = intercept
        self.shape = shape
        self.cls_id = self._special_id("[CLS]")
        self.sep_id = self._special_id("[SEP]")

    @classmethod
    def from_files(
        cls, model: Path, tokenizer: Path, heads: Path, threads: int = 1, shape: WindowShape = WindowShape()
    ) -> EncoderModel:
        return cls(_load_tokenizer(tokenizer), _load_session(model, threads), *_load_heads(heads), shape)

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
        """The windows of one item's content ids; `context` is used when the item fits in one."""
        content = self.shape.tokens - 2
        first_content = content - len(context)
        out = []
        if len(ids) <= first_content:
            return [self._window(context, ids)]
        for start in _window_starts(len(ids), content, self.shape.stride, max_windows):
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

        Windows are sorted by length and run in chunks (see `length_chunks`); the per-token
        quantization makes each row independent of its chunk.
        """
        out = np.empty((len(windows), EMBEDDING_DIM), dtype=np.float32)
        for chunk in length_chunks([len(w.ids) for w in windows], batch):
            members = [windows[i] for i in chunk]
            out[chunk] = pooled(self.run(batch_inputs(members)), members)
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
        """Calibrated probability per window and head (windows x heads).

        An elementwise product summed per row, not a matrix product: each window's result
        is then bitwise the same whatever the number of windows scored with it.
        """
        products = embeddings.astype(np.float64)[:, None, :] * self.coef[None, :, :]
        return _sigmoid(products.sum(axis=2) + self.intercept)


def length_chunks(lengths: Sequence[int], batch: int, tokens: int = CALL_TOKENS) -> list[list[int]]:
    """Indices grouped for onnxruntime calls: sorted by length, at most `batch` windows and
    `tokens` padded tokens per call, and a new call whenever padding would exceed PAD_SLACK
    of the real tokens (on CPU a padded token costs as much as a real one)."""
    chunks: list[list[int]] = []
    chunk: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        n = lengths[i]  # the longest so far: every row of the call is padded to it
        padded = n * (len(chunk) + 1)
        if chunk and (len(chunk) == batch or padded > tokens or padded > PAD_SLACK * (real + n)):
            chunks.append(chunk)
            chunk, real = [], 0
        chunk.append(i)
        real += n
    if chunk:
        chunks.append(chunk)
    return chunks


def batch_inputs(windows: Sequence[Window]) -> dict[str, np.ndarray]:
    """The onnxruntime feed for `windows`, right-padded to the longest."""
    length = max(len(w.ids) for w in windows)
    ids = np.zeros((len(windows), length), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, w in enumerate(windows):
        ids[row, : len(w.ids)] = w.ids
        mask[row, : len(w.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def pooled(hidden: np.ndarray, windows: Sequence[Window]) -> np.ndarray:
    """Mean over each window's own tokens ([CLS], content, [SEP]; not context, not padding),
    then L2 normalisation, as sentence-transformers does.

    Row by row: a BLAS product over the padded batch could round differently with the
    batch's shape, and delta mode must equal full mode exactly.
    """
    out = np.empty((len(windows), hidden.shape[2]), dtype=np.float32)
    for row, w in enumerate(windows):
        tokens = hidden[row, : len(w.ids)]
        if w.context:
            tokens = np.concatenate([tokens[:1], tokens[1 + w.context :]])
        mean = tokens.mean(axis=0)
        out[row] = mean / max(float(np.sqrt(np.sum(mean * mean))), 1e-12)
    return out


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


def verified_files(models_dir: Path, artifact: str = ARTIFACT_NAME) -> tuple[dict[str, Path], dict[str, Any]]:
    """The entry's files after checking each sha256 against the manifest."""
    entry = manifest_entry(artifact, models_dir)
    paths = {}
    for role in ARTIFACT_FILES:
        spec = entry.get("files", {}).get(role)
        if spec is None:
            raise ModelArtifactError(f"model {artifact!r}: manifest lists no {role!r} file")
        path = models_dir / spec["file"]
        if not path.is_file():
            raise ModelArtifactError(f"model {artifact!r}: artifact {path} is missing")
        actual = sha256_file(path)
        if actual != spec["sha256"]:
            raise ModelArtifactError(
                f"model {artifact!r}: artifact {path} has sha256 {actual}, manifest says {spec['sha256']}"
            )
        paths[role] = path
    return paths, entry


@dataclass(frozen=True, slots=True)
class _ItemResult:
    """An item's probabilities per head and its token cost (every view's windows, overlap
    and context included)."""

    scores: tuple[float, ...]
    tokens: int


@dataclass(frozen=True, slots=True)
class _Pending:
    """A scored item whose windows are [lo, hi) of the batch's windows."""

    lo: int
    hi: int
    key: bytes
    role: str


class _ItemMemo:
    """Bounded, thread-safe LRU of item results keyed by (context, text).

    The same system prompt, tool schema or fetched page recurs across conversations;
    scoring it once is exact (scores depend on the text and context only).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[bytes, _ItemResult] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str, context: Sequence[int]) -> bytes:
        h = hashlib.blake2b(digest_size=20)
        h.update(np.asarray(context, dtype=np.int64).tobytes())
        h.update(b"\x00")
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.digest()

    def get(self, key: bytes) -> _ItemResult | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: bytes, result: _ItemResult) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = result
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


@dataclass(slots=True)
class _Plan:
    """One request's items: zero (None), already scored, or waiting for their windows."""

    entries: list[tuple[_ItemResult, str] | _Pending | None]
    context: list[int]  # the state's context after the request
    # Files attached to messages: (index of the item, its files' result), judged as tool output.
    attached: list[tuple[int, tuple[_ItemResult, str] | _Pending]] = field(default_factory=list)


class EncoderClassifier:
    """Monitor-lane classifier: a MiniLM encoder + linear heads, conversation score = running max.

    One class serves two manifest entries: "encoder" (the frozen sentence encoder with
    logistic heads, opt-in) and "detector" (a MiniLM student fine-tuned end to end, on by
    default). What differs is read from the entry:

        roles                           the roles scored (default SCORED_ROLES); the detector
                                        leaves system and developer messages alone: they
                                        are the operator's own instructions, and its
                                        jailbreak head flags ordinary ones (the operator
                                        view, classifiers/operator.py, judges them)
        window_tokens / window_stride   the window shape (default 256 / 192)
        normalize                       score classifiers/normalize.py's views (max over
                                        views) rather than the raw text
        role_heads                      the head that judges a category for a role, e.g.
                                        {"tool": {"prompt_injection": "indirect_injection"}}:
                                        tool outputs are judged by the head trained on them
        head_thresholds                 per head; scores come out scaled so that each
                                        head's threshold is 0.5 (classifiers/scaled.py)
        screen                          {"artifact", "floor"}: a lexical model scores each
                                        item first, and an item whose every lexical head is
                                        under the floor is cleared (all zeros) without the
                                        encoder; its tokens are the lexical model's work
                                        (training/detector_screen.py chooses the floor)

    >>> clf = EncoderClassifier(artifact="detector").load()              # doctest: +SKIP
    >>> upd = clf.update(clf.initial_state(), [parse_item({"role": "user", "content": "hi"})])
    """

    lane: Lane = "monitor"
    max_state_bytes = 1024  # {"max": two floats, "context": up to ~100 ids}

    def __init__(
        self,
        models_dir: Path = MODELS_DIR,
        threads: int = 1,
        max_item_windows: int | None = MAX_ITEM_WINDOWS,
        context_tokens: int = CONTEXT_TOKENS,
        memo_items: int = MEMO_ITEMS,
        artifact: str = ARTIFACT_NAME,
        screen: bool = True,
        lexical: Mapping[str, LexicalClassifier] | None = None,
    ) -> None:
        """`screen=False` leaves the manifest's screen out (every item reaches the model);
        `lexical` holds lexical models already loaded, by manifest entry, for the screen
        to share instead of loading a second copy."""
        self.models_dir = Path(models_dir)
        self.artifact = artifact
        self.name = artifact
        self.threads = threads
        self.max_item_windows = max_item_windows
        self.context_tokens = context_tokens
        self.memo_items = memo_items
        self._memo = _ItemMemo(memo_items)
        self._model: EncoderModel | None = None
        self._entry: dict[str, Any] | None = None
        self._categories: tuple[str, ...] = ()
        self._views: str | None = None  # normalize version of the views it reads (None: raw text)
        self._roles: frozenset[str] = SCORED_ROLES
        self._heads: dict[str, tuple[int, ...]] = {}  # role -> head index of each category
        self._head_thresholds: tuple[float, ...] = ()
        self.use_screen = screen
        self._lexical = dict(lexical or {})
        self._screen: LexicalClassifier | None = None
        self._floor = 0.0

    def load(self) -> EncoderClassifier:
        """Hash-check the artifacts and create the onnxruntime session (once)."""
        paths, entry = verified_files(self.models_dir, self.artifact)
        shape = WindowShape(
            int(entry.get("window_tokens", WINDOW_TOKENS)), int(entry.get("window_stride", WINDOW_STRIDE))
        )
        model = EncoderModel.from_files(
            paths["model"], paths["tokenizer"], paths["heads"], self.threads, shape
        )
        where = f"model {self.artifact!r}"
        categories = tuple(entry.get("categories", model.heads))
        role_heads = entry.get("role_heads", {})
        roles = frozenset(entry.get("roles", SCORED_ROLES))
        try:
            thresholds = tuple(float(entry["head_thresholds"][h]) for h in model.heads)
            heads = {
                role: tuple(model.heads.index(role_heads.get(role, {}).get(c, c)) for c in categories)
                for role in roles
            }
        except (KeyError, ValueError) as exc:
            raise ModelArtifactError(
                f"{where}: heads {model.heads} do not match the manifest ({exc})"
            ) from exc
        trained_on = entry.get("normalize")
        if trained_on is not None and trained_on not in normalize.VERSIONS:
            raise ModelArtifactError(
                f"{where}: trained on normalize v{trained_on}, this serves {normalize.VERSIONS}"
            )
        if trained_on is not None:
            normalize.warm()
        self._views = trained_on  # the views it was trained on, None for raw text
        self._screen, self._floor = self._load_screen(entry.get("screen"), where)
        self._categories, self._heads, self._head_thresholds = categories, heads, thresholds
        self._roles = roles
        self._model, self._entry = model, entry
        return self

    def _load_screen(self, spec: Any, where: str) -> tuple[LexicalClassifier | None, float]:
        if spec is None or not self.use_screen:
            return None, 0.0
        try:
            artifact, floor = str(spec["artifact"]), float(spec["floor"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelArtifactError(f"{where}: screen {spec!r} needs an artifact and a floor") from exc
        if not 0.0 <= floor < 1.0:
            raise ModelArtifactError(f"{where}: screen floor {floor} is not in [0, 1)")
        screen = LexicalClassifier(self.models_dir, artifact=artifact)
        return screen.share(self._lexical.get(artifact)), floor

    def share(self, loaded: EncoderClassifier) -> EncoderClassifier:
        """Use `loaded`'s session and artifacts (one model in memory for several settings)."""
        self._model, self._entry = loaded._model, loaded._entry
        self._categories, self._heads, self._head_thresholds = (
            loaded._categories,
            loaded._heads,
            loaded._head_thresholds,
        )
        self._views, self._roles = loaded._views, loaded._roles
        if self.use_screen:
            self._screen, self._floor = loaded._screen, loaded._floor
        return self

    def without_memo(self) -> EncoderClassifier:
        """The same loaded model with the item memo off: every update does its own work
        (benchmarks compare modes that would otherwise reuse each other's results)."""
        fresh = EncoderClassifier(
            self.models_dir,
            self.threads,
            self.max_item_windows,
            self.context_tokens,
            0,
            self.artifact,
            self.use_screen,
        )
        return fresh.share(self)

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
        return self._categories

    @property
    def thresholds(self) -> dict[str, float]:
        """0.5 for every category: each head's threshold chosen on validation (the
        manifest's `head_thresholds`) is scaled to 0.5 before heads become categories."""
        self._loaded_entry("thresholds")
        return dict.fromkeys(self._categories, 0.5)

    @property
    def screen(self) -> tuple[LexicalClassifier, float] | None:
        """The lexical model that clears items before the encoder runs, and its floor."""
        return None if self._screen is None else (self._screen, self._floor)

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
        context = self._tail(state.get("context", []))
        entries: list[tuple[_ItemResult, str] | _Pending | None] = []
        for item in items:
            if not (item.scored and item.role in self._roles and item.text):
                entries.append(None)
                continue
            key = _ItemMemo.key(item.text, context)
            known = self._memo.get(key)
            if known is None:
                known = self._cleared(item)
                if known is not None:
                    self._memo.put(key, known)
            if known is not None and not self.context_tokens:
                entries.append((known, item.role))  # with context on, the tail needs the ids anyway
                continue
            # The primary view's ids make the context tail; an extra view (something was
            # hidden or encoded) adds windows of its own, without context.
            texts = normalize.views(item.text, self._views).texts() if self._views else [item.text]
            ids = model.tokenize(texts[0])
            extra = [more for more in map(model.tokenize, texts[1:]) if more]
            if not ids and not extra:
                entries.append(None)
                continue
            if known is not None:
                entries.append((known, item.role))
            else:
                lo = len(windows)
                if ids:
                    windows.extend(model.windows(ids, context, self.max_item_windows))
                for more in extra:
                    windows.extend(model.windows(more, (), self.max_item_windows))
                entries.append(_Pending(lo, len(windows), key, item.role))
            if ids:
                context = self._tail(ids)
        attached = []
        if UNTRUSTED_ROLE in self._roles:  # with the tool-output head, never with context
            for index, item in enumerate(items):
                if item.attachments.strip():
                    found = self._attachment(model, item.attachments, windows)
                    if found is not None:
                        attached.append((index, found))
        return _Plan(entries=entries, context=context, attached=attached)

    def _attachment(
        self, model: EncoderModel, text: str, windows: list[Window]
    ) -> tuple[_ItemResult, str] | _Pending | None:
        """The result of a message's attached files, judged as a tool output is (alone)."""
        key = _ItemMemo.key(text, ())
        known = self._memo.get(key) or self._cleared_text(text, count_tokens(text))
        if known is not None:
            return known, UNTRUSTED_ROLE
        texts = normalize.views(text, self._views).texts() if self._views else [text]
        lo = len(windows)
        for view in texts:
            ids = model.tokenize(view)
            if ids:
                windows.extend(model.windows(ids, (), self.max_item_windows))
        return _Pending(lo, len(windows), key, UNTRUSTED_ROLE) if len(windows) > lo else None

    def _cleared(self, item: Item) -> _ItemResult | None:
        """The item's result if the screen clears it: zeros, and the screen's own tokens."""
        return self._cleared_text(item.text, item.tokens)

    def _cleared_text(self, text: str, tokens: int) -> _ItemResult | None:
        if self._screen is None or not text.strip():
            return None
        scores, extra = self._screen.score_text_counted(text)
        if max(scores.values()) >= self._floor:
            return None
        return _ItemResult((0.0,) * len(self.model.heads), tokens + extra)

    def _result(
        self, entry: tuple[_ItemResult, str] | _Pending, probs: np.ndarray, windows: Sequence[Window]
    ) -> tuple[_ItemResult, str]:
        """An entry's result: known, or read from its windows' probabilities (and remembered)."""
        if not isinstance(entry, _Pending):
            return entry
        best = probs[entry.lo : entry.hi].max(axis=0)
        cost = sum(len(w.ids) for w in windows[entry.lo : entry.hi])
        result = _ItemResult(tuple(float(p) for p in best), cost)
        self._memo.put(entry.key, result)
        return result, entry.role

    def _scores(self, result: _ItemResult, role: str) -> Scores:
        return {
            c: scale(result.scores[h], self._head_thresholds[h])
            for c, h in zip(self.categories, self._heads[role], strict=True)
        }

    def _tail(self, ids: Sequence[int]) -> list[int]:
        """The last `context_tokens` ids (none when context is off: ids[-0:] is all of them)."""
        n = self.context_tokens
        return [int(i) for i in ids[len(ids) - n :]] if n > 0 else []

    def _finish(self, state: State, plan: _Plan, probs: np.ndarray, windows: Sequence[Window]) -> Update:
        cats = self.categories
        item_scores: list[Scores] = []
        tokens = 0
        for entry in plan.entries:
            if entry is None:
                item_scores.append(zero_scores(cats))
                continue
            result, role = self._result(entry, probs, windows)
            item_scores.append(self._scores(result, role))
            # The item's cost whether or not the memo saved the work: an Update is a pure
            # function of (state, items).
            tokens += result.tokens
        for index, entry in plan.attached:
            result, role = self._result(entry, probs, windows)
            own = item_scores[index]
            item_scores[index] = {c: max(own[c], v) for c, v in self._scores(result, role).items()}
            tokens += result.tokens
        previous = state.get("max") or zero_scores(cats)
        scores = running_max(previous, item_scores)
        new_state = {"max": dict(scores), "context": list(plan.context)}
        return Update(state=new_state, item_scores=item_scores, scores=scores, tokens=tokens)
