"""The encoder model behind the monitor lane's classifiers: tokenizer, onnxruntime session
and linear heads, text -> windows -> per-head probabilities.

Built by the encoder and detector recipes (torch and transformers are build-time tools
only); served here with numpy, onnxruntime and the `tokenizers` library. A manifest entry
lists three hash-checked files (`verified_files`):

    model       int8 ONNX encoder: input_ids, attention_mask, token_type_ids ->
                last_hidden_state. Weights are per-channel int8; activations are
                quantized per token (one scale per row of each MatMul input), so a
                window's embedding never depends on the other windows of its batch
                or on padding (see models/README.md for the measurements).
    tokenizer   the model's tokenizer.json (Rust fast tokenizer: BERT's WordPiece or XLM-R's
                Unigram; its single-sequence template names the window's end tokens)
    heads       npz (no pickle): `heads` names, `coef` (heads x 384) and `intercept`,
                Platt calibration folded in, applied to mean-pooled, L2-normalised
                window embeddings.

A text's token ids are cut into windows of at most `WindowShape.tokens` (with [CLS] and
[SEP], or <s> and </s>) that overlap; windows run in small length-sorted onnxruntime calls
(`length_chunks`), and each window's probabilities are its own (batch-independent).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.artifacts import checked_file, manifest_entry
from deltaguard.errors import ModelArtifactError

ARTIFACT_NAME = "encoder"

FORMAT_VERSION = 1

ARTIFACT_FILES = ("model", "tokenizer", "heads")

WINDOW_TOKENS = 256  # the model's max_seq_length in sentence-transformers, [CLS] and [SEP] included

WINDOW_STRIDE = 192  # content tokens between window starts: 62 tokens of overlap

BATCH_WINDOWS = 32  # windows per onnxruntime call, at most

# Padded tokens per onnxruntime call, at most (a longer window runs alone). Small calls
# are faster on CPU: a call's activations then stay in the core's L2 cache, and most of
# the time goes to elementwise work, not the int8 products. Measured on this 2-core box,
# one thread, ~1,000-token tool outputs: the detector 73 ms per item with 256 tokens per
# call against 90 ms with all 12 windows in one; the encoder 273 ms against 348 ms.
CALL_TOKENS = 256

PAD_SLACK = 1.15  # padded tokens per call <= 15% more than real ones

MAX_ITEM_WINDOWS = 64  # per item (~12k tokens, ~50 kB of English); longer items are sampled evenly

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
    start: int = 0  # where its content starts among the item's content ids

    @property
    def content(self) -> tuple[int, int]:
        """The item's content ids this window reads: [start, end)."""
        return self.start, self.start + len(self.ids) - 2 - self.context


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
        self.cls_id, self.sep_id = special_ids(tokenizer)

    @classmethod
    def from_files(
        cls, model: Path, tokenizer: Path, heads: Path, threads: int = 1, shape: WindowShape = WindowShape()
    ) -> EncoderModel:
        return cls(_load_tokenizer(tokenizer), _load_session(model, threads), *_load_heads(heads), shape)

    def tokenize(self, text: str) -> list[int]:
        """Content ids of `text` (no special tokens, no truncation).

        Through the batch call, which lets go of the GIL while Rust tokenizes (`encode`
        holds it throughout: a 0.8 MB text froze every other thread, the gateway's event
        loop included, for half a second); the ids are `encode`'s."""
        return self._encoding(text, offsets=False)[0].ids

    def _encoding(self, text: str, offsets: bool) -> tuple[Any, str]:
        """The tokenizer's encoding of `text` (with `offsets`, its character offsets too:
        encode_batch_fast, tokenizers 0.21, skips them), and the text it encoded."""
        fast = getattr(self.tokenizer, "encode_batch_fast", None)
        batch = self.tokenizer.encode_batch if offsets or fast is None else fast
        try:
            return batch([text], add_special_tokens=False)[0], text
        except (TypeError, UnicodeEncodeError):
            # Lone surrogates cannot cross into Rust: replace them, as a UTF-8 decoder would.
            text = text.encode("utf-8", "replace").decode("utf-8")
            return batch([text], add_special_tokens=False)[0], text

    def windows(self, ids: Sequence[int], context: Sequence[int], max_windows: int | None) -> list[Window]:
        """The windows of one item's content ids; `context` is used when the item fits in one."""
        content = self.shape.tokens - 2
        first_content = content - len(context)
        out = []
        if len(ids) <= first_content:
            return [self._window(context, ids)]
        for start in _window_starts(len(ids), content, self.shape.stride, max_windows):
            out.append(self._window((), ids[start : start + content], start))
        return out

    def view_windows(self, view: str, primary: str, max_windows: int | None) -> list[Window]:
        """The windows of an extra view (classifiers/normalize.py: the text with what was hidden
        or encoded spelled out) that read something the primary view does not.

        A window whose characters all appear verbatim in `primary` is left out: the primary
        view's windows read that text already, and an extra view mostly repeats its primary
        (a few folded words in a long file). Each window kept is one `windows` gives, and
        scores as it would among all of them (no statistic crosses windows); the first, with
        the view's markers, is always new.
        """
        encoding, view = self._encoding(view, offsets=True)
        offsets = encoding.offsets
        if not offsets:
            return []
        return [
            w
            for w in self.windows(encoding.ids, (), max_windows)
            if view[offsets[w.start][0] : offsets[w.content[1] - 1][1]] not in primary
        ]

    def _window(self, context: Sequence[int], content: Sequence[int], start: int = 0) -> Window:
        ids = np.empty(len(context) + len(content) + 2, dtype=np.int64)
        ids[0], ids[-1] = self.cls_id, self.sep_id
        ids[1 : 1 + len(context)] = context
        ids[1 + len(context) : -1] = content
        return Window(ids=ids, context=len(context), start=start)

    def char_ranges(self, text: str, contents: Sequence[tuple[int, int]]) -> list[tuple[int, int] | None]:
        """The characters of `text` that each range [a, b) of its content ids
        (`tokenize(text)`'s) came from; None for a range past its ids. Tokenized once with
        offsets (through the batch call, as `tokenize`), so only for the windows a finding
        may point at."""
        try:
            offsets = self.tokenizer.encode_batch([text], add_special_tokens=False)[0].offsets
        except (TypeError, UnicodeEncodeError):  # lone surrogates: the ids came from a repaired copy
            return [None] * len(contents)
        n = len(offsets)
        return [(offsets[a][0], offsets[b - 1][1]) if 0 <= a < b <= n else None for a, b in contents]

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
        return self.score_views([[text] for text in texts], max_windows)

    def _item_maxima(self, windows: list[Window], spans: Sequence[tuple[int, int]]) -> np.ndarray:
        """Per item, the max of its windows' [lo, hi) probabilities (zeros when it has none)."""
        probs = self.head_probabilities(self.embed(windows)) if windows else np.zeros((0, len(self.heads)))
        out = np.zeros((len(spans), len(self.heads)))
        for row, (lo, hi) in enumerate(spans):
            if hi > lo:
                out[row] = probs[lo:hi].max(axis=0)
        return out

    def score_views(
        self, views: Sequence[Sequence[str]], max_windows: int | None = MAX_ITEM_WINDOWS
    ) -> np.ndarray:
        """Item-level probabilities (items x heads) of standalone texts given as their
        normaliser views (primary first): max over the primary's windows and the extra
        views' `view_windows`, as the classifier serves them."""
        windows: list[Window] = []
        spans = []
        for texts in views:
            lo = len(windows)
            windows.extend(self.standalone_windows(texts, max_windows)[0])
            spans.append((lo, len(windows)))
        return self._item_maxima(windows, spans)

    def standalone_windows(self, views: Sequence[str], max_windows: int | None) -> tuple[list[Window], int]:
        """The windows of a text read alone (no context), given as its normaliser views
        (primary first): the primary's and the extra views' `view_windows`; and how many of
        them are the primary's."""
        ids = self.tokenize(views[0]) if views else []
        out = self.windows(ids, (), max_windows) if ids else []
        primary = len(out)
        for extra in views[1:]:
            out.extend(self.view_windows(extra, views[0], max_windows))
        return out, primary

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


def special_ids(tokenizer: Any) -> tuple[int, int]:
    """The ids that open and close a window: the first and last special tokens of the
    tokenizer's single-sequence template (BERT's [CLS]/[SEP], XLM-R's <s>/</s>)."""
    processor = tokenizer.post_processor  # its JSON through the pickling protocol: not the 12 MB vocabulary
    template = json.loads(processor.__getstate__()) if processor is not None else {}
    single = template.get("single") or []
    ends = [part.get("SpecialToken", {}).get("id") for part in single[:1] + single[-1:]]
    if len(ends) != 2 or None in ends:
        raise ModelArtifactError("encoder tokenizer has no [CLS] ... [SEP]-style single-sequence template")
    out = []
    for token in ends:
        found = tokenizer.token_to_id(token)
        if found is None:
            raise ModelArtifactError(f"encoder tokenizer has no {token} token")
        out.append(int(found))
    return out[0], out[1]


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
    # Every call has its own (windows, tokens) shape. onnxruntime keeps a memory plan per
    # shape it has seen and an arena as large as its largest call, for the session's life:
    # over 3,000 calls of random shapes, RSS rose 76 -> 178 MB with both, 132 MB without the
    # plans, 75 MB without either (glibc's heap, which the gateway trims, takes the buffers),
    # and the calls' CPU time did not change (docs/hardening.md).
    options.enable_mem_pattern = False
    options.enable_cpu_mem_arena = False
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
        paths[role] = checked_file(artifact, models_dir / spec["file"], spec["sha256"])
    return paths, entry
