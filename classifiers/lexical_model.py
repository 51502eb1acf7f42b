"""The lexical model: TF-IDF n-grams + logistic regression, served from plain arrays.

The model is trained by the lexical recipes (`python -m training.train_lexical`,
`training.train_lexical_gate`) with scikit-learn and served here with numpy and
numba-compiled loops (lexical_kernels.py). The artifact (`models/lexical-v*.npz`, named
and hash-checked by the manifest) holds plain arrays, no pickle:

    word_vocab, word_idf     word 1-2 grams of `token_pattern` tokens on lowercased text
    char_vocab, char_idf     char_wb 3-5 grams (n-grams inside space-padded words)
    coef (heads x features)  Platt-calibrated logistic regression, one row per head,
    intercept (heads,)       word features first, then char features
    heads                    category names, e.g. ("prompt_injection", "jailbreak")
    config                   JSON of the vectorizer settings this module reproduces

Scoring reproduces sklearn's `TfidfVectorizer(sublinear_tf=True, norm="l2")` for each
of the two vectorizers, concatenated as a `FeatureUnion` does, followed by
`CalibratedClassifierCV(method="sigmoid")` over `LogisticRegression`; the training
recipe checks that the two agree within 1e-6 on its whole test split.

An artifact whose config names a normaliser version (`"normalize"`, lexical-v3 on) is
scored on the views of classifiers/normalize.py: the primary view and, when something was
hidden or encoded, the extra view; a text takes the max over its views. Long texts are
scored in overlapping chunks of `CHUNK_CHARS` and take the max, so cost stays linear in
the text length. An artifact whose config says `"pieces": true` (lexical-v5 and later) also reads
untrusted text piece by piece (`score_located`, classifiers/segments.py), cut in the
`reading` the caller passes (the view passes its manifest entry's).

Speed: all chunks of all texts of one call are scored in one call of the compiled
kernels of classifiers/lexical_kernels.py, which walk each text's code points once per
block, and each text gets the same numbers as it would alone, to the bit. Char n-grams
are packed into one uint64 each (small per-character codes), counted in a small hash
table and looked up in an open-addressing table of the vocabulary's n-grams packed the
same way: the packing is exact, so lookups cannot collide. Word tokens are runs of word
characters, identified by a polynomial hash of their code points that is looked up among
the vocabulary tokens' hashes and then checked character by character, so a hash
collision cannot turn one token into another.
"""

from __future__ import annotations

import bisect
import itertools
import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from deltaguard.classifiers import lexical_kernels as kernels
from deltaguard.classifiers import normalize, segments
from deltaguard.classifiers.base import count_tokens
from deltaguard.classifiers.characters import code_point_class
from deltaguard.errors import ModelArtifactError

FORMAT_VERSION = 1
CHUNK_CHARS = 2000
CHUNK_OVERLAP = 200
Span = tuple[int, int]  # (start, end) character range in a scored text

_MAX_CODE_BITS = 12  # char codes take at most 12 bits: alphabets up to 4,095 symbols
_POLY_INVERSE = np.uint64(pow(int(kernels.POLY_BASE), -1, 1 << 64))  # POLY_BASE is odd

_ARRAYS = frozenset(
    {
        "format_version",
        "config",
        "heads",
        "word_vocab",
        "word_idf",
        "char_vocab",
        "char_idf",
        "coef",
        "intercept",
    }
)
_EXPECTED_CONFIG = {
    "word": {
        "analyzer": "word",
        "lowercase": True,
        "sublinear_tf": True,
        "norm": "l2",
        "token_pattern": r"(?u)\b\w\w+\b",
    },
    "char": {"analyzer": "char_wb", "lowercase": True, "sublinear_tf": True, "norm": "l2"},
}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # The floor only avoids an overflow warning: at z = -500 the result is 0 anyway (a ufunc,
    # not np.clip, whose Python wrappers cost more than the arithmetic on a few rows).
    return 1.0 / (1.0 + np.exp(-np.maximum(z, -500.0)))


def _chunked(every: Sequence[Sequence[str]]) -> tuple[list[str], list[int]]:
    """The chunks of each entry's views (one text's), in order, and how many per entry."""
    chunks: list[str] = []
    counts = []
    for views in every:
        before = len(chunks)
        for view in views:
            chunks += chunk_text(view)
        counts.append(len(chunks) - before)
    return chunks, counts


def chunk_text(text: str) -> list[str]:
    """The pieces of `text` that are scored: one, or overlapping CHUNK_CHARS windows."""
    if len(text) <= CHUNK_CHARS:
        return [text]
    step = CHUNK_CHARS - CHUNK_OVERLAP
    return [text[start : start + CHUNK_CHARS] for start in range(0, len(text) - CHUNK_OVERLAP, step)]


class _PackedIndex:
    """Exact map from distinct nonzero uint64 keys (packed n-grams) to int values >= 0, as
    the kernels read it: `table` rows (key, value), key 0 marking an empty row, found by
    linear probing from the home slot `(key * kernels.HASH_MULTIPLIER) >> shift` (load factor at
    most 1/4). Every probe compares the stored key itself, so a hash collision can cost
    time but never returns a wrong value.
    """

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=np.uint64)
        values = np.asarray(values, dtype=np.int64)
        n = len(keys)
        ordered = np.sort(keys)
        if n and (ordered[0] == 0 or np.any(ordered[1:] == ordered[:-1])):
            raise ValueError("index keys must be distinct and nonzero")
        if n and values.min() < 0:
            raise ValueError("index values must be >= 0")
        bits = max(4, (4 * n - 1).bit_length())
        self.shift = np.uint64(64 - bits)
        # Linear probing, built in one pass: in order of home slot, each key takes the
        # first free slot from its home on, so the slots between a key's home and its
        # place are all taken and probing from home reaches it. Slots past 2**bits
        # take the overflow instead of wrapping around.
        home = ((keys * kernels.HASH_MULTIPLIER) >> self.shift).astype(np.int64)
        order = np.argsort(home, kind="stable")
        steps = np.arange(n)
        place = np.maximum.accumulate(home[order] - steps) + steps if n else steps
        size = max(1 << bits, int(place[-1]) + 1 if n else 0) + 1  # >= 1 empty slot at the end
        self.table = np.zeros((size, 2), dtype=np.uint64)
        self.table[place, 0] = keys[order]
        self.table[place, 1] = values[order].astype(np.uint64)


def token_hashes(chars: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """sum(chars[s + i] * BASE**i) modulo 2**64 of each run, the hash the word kernel
    computes, for all runs at once from one prefix sum (uint64 arithmetic wraps)."""
    n = len(chars)
    powers = np.full(n + 1, kernels.POLY_BASE, dtype=np.uint64)
    powers[0] = 1
    np.multiply.accumulate(powers, out=powers)
    inverses = np.full(n + 1, _POLY_INVERSE, dtype=np.uint64)
    inverses[0] = 1
    np.multiply.accumulate(inverses, out=inverses)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    (chars.astype(np.uint64) * powers[:n]).cumsum(out=prefix[1:])
    return (prefix.take(starts + lengths) - prefix.take(starts)) * inverses.take(starts)


class LexicalModel:
    """The exported model as numpy arrays, with sklearn's preprocessing re-implemented."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        try:
            self._build(arrays)
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise ModelArtifactError(f"lexical artifact is malformed: {exc!r}") from exc

    @classmethod
    def from_npz(cls, path: Path) -> LexicalModel:
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {key: npz[key] for key in npz.files}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise ModelArtifactError(f"cannot read lexical artifact {path}: {exc}") from exc
        return cls(arrays)

    def _build(self, arrays: Mapping[str, np.ndarray]) -> None:
        missing = sorted(_ARRAYS - set(arrays))
        if missing:
            raise KeyError(f"missing arrays {missing}")
        if int(arrays["format_version"]) != FORMAT_VERSION:
            raise ValueError(f"format_version {int(arrays['format_version'])} != {FORMAT_VERSION}")
        config = json.loads(str(arrays["config"]))
        for block, expected in _EXPECTED_CONFIG.items():
            for key, value in expected.items():
                if config[block][key] != value:
                    raise ValueError(f"unsupported {block} setting {key}={config[block][key]!r}")
        self.config = config
        # Artifacts trained on normalised text (classifiers/normalize.py) say so; older ones
        # read the raw text, as they were trained.
        self.normalizer: str | None = config.get("normalize")
        if self.normalizer is not None and self.normalizer not in normalize.VERSIONS:
            raise ValueError(f"normalize version {self.normalizer!r} is not one of {normalize.VERSIONS}")
        if self.normalizer is not None:
            normalize.warm()
        # Trained on pieces of real text (lexical-v5 and later): untrusted text is read piece by piece
        # too (`score_located`); older artifacts read it whole, as they were trained.
        self.by_piece = bool(config.get("pieces", False))
        if self.by_piece:
            segments.warm()
        self.heads: tuple[str, ...] = tuple(str(h) for h in arrays["heads"])
        # Word characters to `re` (`\w`, as in the token pattern) and whitespace (`\s`, what
        # str.split() splits on).
        self._is_word, is_space = code_point_class(r"\w"), code_point_class(r"\s")

        # Word block. Tokens are found and identified by the word kernel: a token is a run of at
        # least two word characters, identified by a polynomial hash of its code points
        # that is looked up among the vocabulary tokens' hashes and then checked
        # character by character, so a hash collision cannot produce a wrong token.
        word_vocab = arrays["word_vocab"]
        self._word_ngram = tuple(config["word"]["ngram_range"])
        if self._word_ngram[0] != 1 or self._word_ngram[1] not in (1, 2):
            raise ValueError(f"unsupported word ngram_range {self._word_ngram}")
        grams = [str(g).split(" ") for g in word_vocab.tolist()]
        if any(len(parts) > self._word_ngram[1] or not all(parts) for parts in grams):
            raise ValueError("a word vocabulary entry does not fit the word ngram_range")
        token_id: dict[str, int] = {}
        for parts in grams:
            for tok in parts:
                token_id.setdefault(tok, len(token_id))
        tokens = list(token_id)
        joined = "".join(tokens)
        self._token_chars = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        self._token_len = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
        self._token_start = np.cumsum(self._token_len) - self._token_len
        if np.any(self._token_len < 2) or not self._is_word.take(self._token_chars).all():
            raise ValueError("a word vocabulary token is not a token of the word token_pattern")
        self._tokens = _PackedIndex(token_hashes(self._token_chars, self._token_start, self._token_len),
                                    np.arange(len(tokens)))  # fmt: skip  # distinct: checked there
        self._unigram_feature = np.full(len(tokens) + 1, -1, dtype=np.int64)  # [-1]: unknown
        pair_keys, pair_features = [], []
        for i, parts in enumerate(grams):
            ids = [token_id[tok] for tok in parts]
            if len(ids) == 1:
                self._unigram_feature[ids[0]] = i
            else:  # ids + 1 so that no pair packs to the empty key 0
                pair_keys.append(((ids[0] + 1) << 32) | (ids[1] + 1))
                pair_features.append(i)
        self._pairs = _PackedIndex(np.array(pair_keys, dtype=np.uint64), np.array(pair_features))
        word_idf = np.asarray(arrays["word_idf"], dtype=np.float64)
        n_word = len(word_vocab)

        # Char block: each character of the vocabulary's alphabet gets a code 1..A (0:
        # not in the alphabet; every whitespace character gets the code of " "), and an
        # n-gram packs its codes into one uint64, first character lowest.
        char_vocab = np.asarray(arrays["char_vocab"])
        self._char_ngram = tuple(config["char"]["ngram_range"])
        lo, hi = self._char_ngram
        width = char_vocab.dtype.itemsize // 4
        if not (2 <= lo <= hi <= width):
            raise ValueError(f"unsupported char ngram_range {self._char_ngram}")
        points = np.ascontiguousarray(char_vocab.astype(f"<U{width}")).view("<u4")
        points = points.reshape(len(char_vocab), width).astype(np.int64)
        alphabet = np.unique(points[points != 0])
        code_bits = max(1, len(alphabet).bit_length())
        if code_bits > _MAX_CODE_BITS or hi * code_bits > 64:
            raise ValueError(f"char alphabet of {len(alphabet)} symbols is too large to pack")
        self._code_bits = code_bits
        codes = np.where(points != 0, np.searchsorted(alphabet, points) + 1, 0).astype(np.uint64)
        keys = np.zeros(len(char_vocab), dtype=np.uint64)
        for j in range(width):
            keys |= codes[:, j] << np.uint64(code_bits * j)
        self._chars = _PackedIndex(keys, np.arange(len(char_vocab)))
        # One code per Unicode code point (2.2 MB), so a text's codes are one gather.
        self._codes = np.zeros(0x110000, dtype=np.uint16)
        self._codes[alphabet] = np.arange(1, len(alphabet) + 1, dtype=np.uint16)
        self._space_code = int(self._codes[ord(" ")])
        self._codes[is_space] = self._space_code
        char_idf = np.asarray(arrays["char_idf"], dtype=np.float64)
        n_char = len(char_vocab)

        coef = np.asarray(arrays["coef"], dtype=np.float64)
        intercept = np.asarray(arrays["intercept"], dtype=np.float64)
        if coef.shape != (len(self.heads), n_word + n_char) or intercept.shape != (len(self.heads),):
            raise ValueError(f"coef {coef.shape} / intercept {intercept.shape} do not fit the vocabulary")
        if word_idf.shape != (n_word,) or char_idf.shape != (n_char,):
            raise ValueError("idf vectors do not match the vocabularies")
        # Per feature, one row (idf, coef of each head): what the kernels read of it.
        self._word_weights = np.ascontiguousarray(np.column_stack([word_idf, coef[:, :n_word].T]))
        self._char_weights = np.ascontiguousarray(np.column_stack([char_idf, coef[:, n_word:].T]))
        self._intercept = intercept
        self.n_features = n_word + n_char
        self._logits([" "])  # compiles the kernels (or loads them from numba's cache) now

    # -- scoring -------------------------------------------------------------------------

    def _logits(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated logits, texts x heads, each text scored whole (no chunking).

        The texts are lowercased and encoded once, each as the code points of " " + text
        + " ": the spaces stand for the padding sklearn's char_wb adds. Each text is a
        segment of the kernels' input and is scored as if it were alone."""
        joined = f" {'  '.join(texts)} "
        if joined.isascii():  # lowercasing keeps every length: one call for all the texts
            padded: Sequence[str] = texts
            joined = joined.lower()
        else:  # a few characters lowercase to two ("İ"): each text is lowercased alone
            padded = [text.lower() for text in texts]
            joined = f" {'  '.join(padded)} "
        points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        # Each segment is its text and two spaces of padding. A list, not numpy calls:
        # most calls are one text and its pieces, where each numpy call costs more.
        bounds = np.array([0, *itertools.accumulate(len(text) + 2 for text in padded)], dtype=np.int64)
        out = np.zeros((len(texts), len(self.heads)))
        kernels.word_logits(
            points, bounds, self._is_word, self._tokens.table, self._tokens.shift, self._token_chars,
            self._token_start, self._token_len, self._unigram_feature, self._pairs.table,
            self._pairs.shift, self._word_ngram[1] == 2, self._word_weights, out,
        )  # fmt: skip
        lo, hi = self._char_ngram
        kernels.char_logits(
            points, bounds, self._codes, self._space_code, lo, hi, self._code_bits,
            self._chars.table, self._chars.shift, self._char_weights, out,
        )  # fmt: skip
        out += self._intercept
        return out

    def decision_function(self, text: str) -> np.ndarray:
        """Calibrated logits, one per head, for the whole text (no chunking)."""
        return self._logits([text])[0]

    def predict_proba(self, text: str) -> np.ndarray:
        """Positive-class probability per head for the whole text, as sklearn gives it."""
        return _sigmoid(self._logits([text])[0])

    def _views(
        self, texts: Sequence[str]
    ) -> tuple[list[Sequence[str]], list[int], list[normalize.Views | None]]:
        """Per text, its views; the tokens of its extra view (work beyond the item's own
        tokens, 0 if none); and what the normaliser found (None without a normaliser, when
        the one view is the raw text)."""
        if self.normalizer is None:
            return [(text,) for text in texts], [0] * len(texts), [None] * len(texts)
        found = [normalize.views(text, self.normalizer) for text in texts]
        extra = [0 if v.extra is None else count_tokens(v.extra) for v in found]
        return [v.texts() for v in found], extra, found

    def _pieces_views(self, text: str, spans: list[Span], owner: normalize.Views) -> list[Sequence[str]]:
        """The views of a text's pieces (`spans`), `owner` the text's own. The pieces of a
        text in which the normaliser found nothing hidden or encoded are read as having
        nothing either: their primary views alone (one pass for them all:
        `normalize.primary_many`), which spares them most of the normaliser. When all it
        found was inside lines (`Views.within_lines`: a sentence written as one token, a line
        written backwards; identifiers and headings give one text in twenty-five such a
        token), only the pieces that hold what it found read their own views, the others
        their primary views."""
        pieces = [text[a:b] for a, b in spans]
        if owner.extra is None:
            return [(view,) for view in normalize.primary_many(pieces)]
        # Spots are found in the text as received: if its primary view alone holds what was
        # found (a sentence joined in full-width letters), every piece reads its views.
        spots = normalize.rewritten_spots(text) if owner.within_lines else []
        if not spots:
            return [normalize.views(piece, self.normalizer).texts() for piece in pieces]
        primaries = pieces if owner.plain else normalize.primary_many(pieces)
        out: list[Sequence[str]] = [(view,) for view in primaries]
        # Pieces come in order of their starts; not of their ends (a sentence of wrapped
        # lines ends past the lines it starts among: segments.py's reading 4).
        starts = [a for a, _ in spans]
        holding = set()  # a piece may hold several spots: its views are made once
        for start, end in spots:
            holding.update(k for k in range(bisect.bisect_left(starts, end)) if spans[k][1] > start)
        for k in holding:
            out[k] = normalize.views(pieces[k], self.normalizer).texts()
        return out

    def _max_of_chunks(self, chunks: list[str], counts: Sequence[int]) -> np.ndarray:
        """Per group of `counts` consecutive chunks (one text's views, `_chunked`) and head,
        the max probability (0 for an empty group): all of them in one pass of the kernels."""
        proba = _sigmoid(self._logits(chunks)) if chunks else np.zeros((0, len(self.heads)))
        if all(counts):  # plain Python: most calls are one text, a few chunks and pieces
            if len(chunks) == len(counts):  # one chunk each
                return proba
            return np.maximum.reduceat(proba, np.cumsum([0, *counts[:-1]]), axis=0)
        sizes = np.asarray(counts, dtype=np.int64)
        some = np.flatnonzero(sizes)
        out = np.zeros((len(sizes), len(self.heads)))
        if len(some):
            out[some] = np.maximum.reduceat(proba, np.cumsum(sizes[some]) - sizes[some], axis=0)
        return out

    def score_views(self, texts: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """Per text and head, the max probability over its views and their chunks; and per
        text, the tokens of its extra view (`_views`)."""
        if not texts:
            return np.zeros((0, len(self.heads))), []
        every, extra, _ = self._views(texts)
        return self._max_of_chunks(*_chunked(every)), extra

    def score_located(
        self, texts: Sequence[str], reading: int = 1
    ) -> tuple[np.ndarray, list[int], list[list[Span | None]]]:
        """`score_views` of untrusted texts, which an artifact trained on pieces also reads
        piece by piece (classifiers/segments.py), so that one injected sentence weighs as
        much in a 16 KB file as alone, as `reading` cuts them (and, in readings 3 and 4, a long
        text by its pieces alone). Per text and head: the max over views, chunks and pieces; per text,
        the extra tokens of its normalised view (as `score_views`); per text and head, the
        piece holding the max, or None when the text read whole holds it."""
        where: list[list[Span | None]] = [[None] * len(self.heads) for _ in texts]
        if not texts:
            return np.zeros((0, len(self.heads))), [], where
        every, extra, found_views = self._views(texts)
        spans = [segments.pieces(t, reading) if self.by_piece else [] for t in texts]
        read = [segments.read_whole(reading, t, at) for t, at in zip(texts, spans, strict=True)]
        chunks, counts = _chunked([v if whole else () for v, whole in zip(every, read, strict=True)])
        for text, views, found in zip(texts, found_views, spans, strict=True):
            # A piece (at most segments.PIECE_CHARS) is shorter than a chunk: read whole. Its
            # tokens are the text's own, read again: not counted twice (`tokens_scored` counts
            # the delta, docs/contract.md).
            if views is None or (views.plain and views.extra is None):
                # Every piece is its own view (`_pieces_views`) and one chunk: most tool
                # outputs, whose thousands of lines then cost no call each.
                chunks += [text[a:b] for a, b in found]
                counts += [1] * len(found)
                continue
            more_chunks, more_counts = _chunked(self._pieces_views(text, found, views))
            chunks += more_chunks
            counts += more_counts
        p = self._max_of_chunks(chunks, counts)
        scores, p = p[: len(texts)], p[len(texts) :]
        lo = 0
        for i, found in enumerate(spans):
            if not found:
                continue
            block = p[lo : lo + len(found)]
            for h, best in enumerate(block.argmax(axis=0).tolist()):
                if block[best, h] > scores[i, h]:
                    scores[i, h] = block[best, h]
                    where[i][h] = found[best]
            lo += len(found)
        return scores, extra, where

    def score_many(self, texts: Sequence[str]) -> np.ndarray:
        """Per text and head, the max probability over its views and chunks (`score_views`)."""
        return self.score_views(texts)[0]

    def score(self, text: str) -> np.ndarray:
        """Per-head max probability over the text's views and overlapping chunks."""
        return self.score_views([text])[0][0]
