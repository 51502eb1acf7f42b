"""Lexical prompt-injection / jailbreak classifier: TF-IDF n-grams + logistic regression.

The model is trained by `python -m models.train_lexical` with scikit-learn and served
here with numpy and the standard library only. The artifact (`models/lexical-v1.npz`,
hash-checked through the manifest) holds plain arrays, no pickle:

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

Only what users, system/developer prompts and tools say is scored; the assistant's own
messages and function calls get zero. Long items are scored in overlapping chunks of
`CHUNK_CHARS` and take the max, so cost stays linear in the text length.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Collection, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from classifiers.base import Lane, Scores, State, Update, count_tokens, running_max, zero_scores
from models import MODELS_DIR
from pipeline.artifacts import verified_path
from pipeline.errors import ModelArtifactError
from pipeline.items import Item

ARTIFACT_NAME = "lexical"
FORMAT_VERSION = 1
CHUNK_CHARS = 2000
CHUNK_OVERLAP = 200
SCORED_ROLES = frozenset({"user", "system", "developer", "tool"})

# sklearn's char analyzers collapse runs of whitespace before splitting into words.
_WHITE_SPACES = re.compile(r"\s\s+")
_CODE_BITS = 12  # bits per character code when packing a char n-gram into an integer
_MAX_ALPHABET = (1 << _CODE_BITS) - 1  # code 0 marks "character not in the vocabulary"

_EXPECTED_CONFIG = {
    "word": {"analyzer": "word", "lowercase": True, "sublinear_tf": True, "norm": "l2"},
    "char": {"analyzer": "char_wb", "lowercase": True, "sublinear_tf": True, "norm": "l2"},
}


class LexicalNotLoadedError(RuntimeError):
    """`update` was called on a LexicalClassifier whose `load()` has not run."""


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # Clipping only avoids an overflow warning: at |z| = 500 the result is 0 or 1 anyway.
    return 1.0 / (1.0 + np.exp(-np.clip(z, -500.0, 500.0)))


def _tfidf_block(idx: np.ndarray, counts: np.ndarray, idf: np.ndarray) -> np.ndarray:
    """l2-normalised sublinear tf-idf values of the features `idx` seen `counts` times."""
    values = (np.log(counts) + 1.0) * idf[idx]
    norm = np.sqrt(np.dot(values, values))
    return values / norm if norm > 0.0 else values


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
        if int(arrays["format_version"]) != FORMAT_VERSION:
            raise ValueError(f"format_version {int(arrays['format_version'])} != {FORMAT_VERSION}")
        config = json.loads(str(arrays["config"]))
        for block, expected in _EXPECTED_CONFIG.items():
            for key, value in expected.items():
                if config[block][key] != value:
                    raise ValueError(f"unsupported {block} setting {key}={config[block][key]!r}")
        self.config = config
        self.heads: tuple[str, ...] = tuple(str(h) for h in arrays["heads"])

        # Word block: tokens map to ids with one dict; unigram features come from an id
        # -> feature table and bigram features from a sorted array of packed id pairs.
        word_vocab = arrays["word_vocab"]
        self._word_re = re.compile(config["word"]["token_pattern"])
        self._word_ngram = tuple(config["word"]["ngram_range"])
        if self._word_ngram[0] != 1 or self._word_ngram[1] not in (1, 2):
            raise ValueError(f"unsupported word ngram_range {self._word_ngram}")
        grams = [str(g).split(" ") for g in word_vocab.tolist()]
        if any(len(parts) > self._word_ngram[1] or not all(parts) for parts in grams):
            raise ValueError("a word vocabulary entry does not fit the word ngram_range")
        self._token_id: dict[str, int] = {}
        for parts in grams:
            for tok in parts:
                self._token_id.setdefault(tok, len(self._token_id))
        self._unigram_feature = np.full(len(self._token_id) + 1, -1, dtype=np.int64)  # [-1]: unknown
        pair_keys, pair_features = [], []
        for i, parts in enumerate(grams):
            ids = [self._token_id[tok] for tok in parts]
            if len(ids) == 1:
                self._unigram_feature[ids[0]] = i
            else:
                pair_keys.append((ids[0] << 32) | ids[1])
                pair_features.append(i)
        order = np.argsort(np.array(pair_keys, dtype=np.int64), kind="stable")
        self._pair_keys = np.array(pair_keys, dtype=np.int64)[order]
        self._pair_feature = np.array(pair_features, dtype=np.int64)[order]
        self._word_idf = np.asarray(arrays["word_idf"], dtype=np.float64)
        n_word = len(word_vocab)

        # Char block: each n-gram packed into one uint64 (12 bits per character code),
        # looked up with a binary search so a whole text is featurised in numpy.
        char_vocab = np.asarray(arrays["char_vocab"])
        self._char_ngram = tuple(config["char"]["ngram_range"])
        lo, hi = self._char_ngram
        width = char_vocab.dtype.itemsize // 4
        if not (1 <= lo <= hi <= width) or hi * _CODE_BITS > 64:
            raise ValueError(f"unsupported char ngram_range {self._char_ngram}")
        points = np.ascontiguousarray(char_vocab.astype(f"<U{width}")).view("<u4")
        points = points.reshape(len(char_vocab), width).astype(np.int64)
        alphabet = np.unique(points[points != 0])
        if len(alphabet) > _MAX_ALPHABET:
            raise ValueError(f"char alphabet of {len(alphabet)} > {_MAX_ALPHABET} symbols")
        codes = np.where(points != 0, np.searchsorted(alphabet, points) + 1, 0).astype(np.uint64)
        keys = np.zeros(len(char_vocab), dtype=np.uint64)
        for j in range(width):
            keys |= codes[:, j] << np.uint64(_CODE_BITS * j)
        order = np.argsort(keys, kind="stable")
        self._char_keys = keys[order]
        if len(self._char_keys) > 1 and np.any(self._char_keys[1:] == self._char_keys[:-1]):
            raise ValueError("char vocabulary has duplicate n-grams")
        self._char_feature = order.astype(np.int64)
        # Dense code table for the Basic Multilingual Plane; other code points go
        # through a binary search over the (rare) astral part of the alphabet.
        self._bmp_codes = np.zeros(0x10000, dtype=np.uint64)
        bmp = alphabet < 0x10000
        self._bmp_codes[alphabet[bmp]] = np.arange(1, len(alphabet) + 1, dtype=np.uint64)[bmp]
        self._astral = alphabet[~bmp]
        self._astral_codes = np.arange(1, len(alphabet) + 1, dtype=np.uint64)[~bmp]
        self._char_idf = np.asarray(arrays["char_idf"], dtype=np.float64)
        n_char = len(char_vocab)

        coef = np.asarray(arrays["coef"], dtype=np.float64)
        intercept = np.asarray(arrays["intercept"], dtype=np.float64)
        if coef.shape != (len(self.heads), n_word + n_char) or intercept.shape != (len(self.heads),):
            raise ValueError(f"coef {coef.shape} / intercept {intercept.shape} do not fit the vocabulary")
        if self._word_idf.shape != (n_word,) or self._char_idf.shape != (n_char,):
            raise ValueError("idf vectors do not match the vocabularies")
        self._word_coef = np.ascontiguousarray(coef[:, :n_word])
        self._char_coef = np.ascontiguousarray(coef[:, n_word:])
        self._intercept = intercept
        self.n_features = n_word + n_char

    # -- featurisation -------------------------------------------------------------------

    def _word_counts(self, lowered: str) -> tuple[np.ndarray, np.ndarray]:
        tokens = self._word_re.findall(lowered)
        n = len(tokens)
        ids = np.fromiter(map(self._token_id.get, tokens, repeat(-1, n)), dtype=np.int64, count=n)
        features = self._unigram_feature[ids]  # unknown tokens (-1) hit the -1 sentinel
        if self._word_ngram[1] == 2 and n > 1 and len(self._pair_keys):
            left, right = ids[:-1], ids[1:]
            both = (left >= 0) & (right >= 0)
            keys = (left[both] << 32) | right[both]
            at = np.minimum(np.searchsorted(self._pair_keys, keys), len(self._pair_keys) - 1)
            features = np.concatenate([features, self._pair_feature[at[self._pair_keys[at] == keys]]])
        features = features[features >= 0]
        if features.size == 0:
            return features, np.zeros(0)
        idx, counts = np.unique(features, return_counts=True)
        return idx, counts.astype(np.float64)

    def _char_codes(self, points: np.ndarray) -> np.ndarray:
        codes = self._bmp_codes[np.minimum(points, 0xFFFF)]
        astral = points > 0xFFFF
        if astral.any():
            codes[astral] = 0
            if len(self._astral):
                at = np.minimum(np.searchsorted(self._astral, points[astral]), len(self._astral) - 1)
                codes[astral] = np.where(self._astral[at] == points[astral], self._astral_codes[at], 0)
        return codes

    def _char_counts(self, lowered: str) -> tuple[np.ndarray, np.ndarray]:
        words = _WHITE_SPACES.sub(" ", lowered).split()
        if not words:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        # sklearn's char_wb pads every word with one space on each side and takes the
        # n-grams inside each padded word (a padded word shorter than n once, as a
        # whole). Joining the padded words gives one string in which those are exactly
        # the windows that contain no two adjacent spaces.
        padded = " " + "  ".join(words) + " "
        points = np.frombuffer(padded.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        codes = self._char_codes(points)
        unknown_cum = np.concatenate(([0], np.cumsum(codes == 0)))
        space = points == 32
        double_cum = np.concatenate(([0], np.cumsum(space[:-1] & space[1:])))
        length = len(points)
        keys = []
        lo, hi = self._char_ngram
        for n in range(lo, hi + 1):
            m = length - n + 1
            if m <= 0:
                break
            ok = (unknown_cum[n : n + m] == unknown_cum[:m]) & (
                double_cum[n - 1 : n - 1 + m] == double_cum[:m]
            )
            if n == lo:
                key = codes[:m].copy()
                for j in range(1, n):
                    key |= codes[j : j + m] << np.uint64(_CODE_BITS * j)
            else:  # extend the (n-1)-gram keys by one character
                key = key[:m] | (codes[n - 1 : n - 1 + m] << np.uint64(_CODE_BITS * (n - 1)))
            keys.append(key[ok])
        if not keys:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        uniq, counts = np.unique(np.concatenate(keys), return_counts=True)
        at = np.minimum(np.searchsorted(self._char_keys, uniq), len(self._char_keys) - 1)
        hit = self._char_keys[at] == uniq
        return self._char_feature[at[hit]], counts[hit].astype(np.float64)

    # -- scoring -------------------------------------------------------------------------

    def decision_function(self, text: str) -> np.ndarray:
        """Calibrated logits, one per head, for the whole text (no chunking)."""
        lowered = text.lower()
        w_idx, w_count = self._word_counts(lowered)
        c_idx, c_count = self._char_counts(lowered)
        w_val = _tfidf_block(w_idx, w_count, self._word_idf)
        c_val = _tfidf_block(c_idx, c_count, self._char_idf)
        return self._intercept + self._word_coef[:, w_idx] @ w_val + self._char_coef[:, c_idx] @ c_val

    def predict_proba(self, text: str) -> np.ndarray:
        """Positive-class probability per head for the whole text, as sklearn gives it."""
        return _sigmoid(self.decision_function(text))

    def score(self, text: str) -> np.ndarray:
        """Per-head max probability over overlapping chunks of at most CHUNK_CHARS."""
        if len(text) <= CHUNK_CHARS:
            return self.predict_proba(text)
        step = CHUNK_CHARS - CHUNK_OVERLAP
        best = np.zeros(len(self.heads))
        start = 0
        while True:
            best = np.maximum(best, self.predict_proba(text[start : start + CHUNK_CHARS]))
            if start + CHUNK_CHARS >= len(text):
                return best
            start += step


class LexicalClassifier:
    """Gate-lane classifier: per-item lexical scores, conversation score = running max."""

    name = "lexical"
    categories: tuple[str, ...] = ("prompt_injection", "jailbreak")
    lane: Lane = "gate"
    max_state_bytes = 256

    def __init__(self, models_dir: Path = MODELS_DIR, *, roles: Collection[str] = SCORED_ROLES) -> None:
        """`roles`: item roles that are scored. The default includes system and developer
        prompts; the model tends to flag benign "You are a ... assistant" prompts (no
        such negatives exist in the training data, see models/README.md), so a deployment
        that trusts its own system prompts may pass roles={"user", "tool"}."""
        self.models_dir = Path(models_dir)
        self.roles = frozenset(roles)
        self._model: LexicalModel | None = None
        self._entry: dict[str, Any] | None = None

    def load(self) -> LexicalClassifier:
        """Read and hash-check the artifact; raises ModelArtifactError if it is not usable."""
        path, entry = verified_path(ARTIFACT_NAME, self.models_dir)
        model = LexicalModel.from_npz(path)
        if model.heads != self.categories:
            raise ModelArtifactError(
                f"lexical artifact {path} has heads {model.heads}, expected {self.categories}"
            )
        self._model, self._entry = model, entry
        return self

    @property
    def version(self) -> str:
        if self._entry is None:
            raise AttributeError("LexicalClassifier.version is read from the manifest: call load() first")
        return str(self._entry["version"])

    @property
    def thresholds(self) -> dict[str, float]:
        """Per-head decision thresholds chosen on validation (see models/README.md)."""
        if self._entry is None:
            raise AttributeError("LexicalClassifier.thresholds come from the manifest: call load() first")
        return {head: float(t) for head, t in self._entry["thresholds"].items()}

    def _require_model(self) -> LexicalModel:
        if self._model is None:
            raise LexicalNotLoadedError("LexicalClassifier is not loaded: call load() before update()")
        return self._model

    def initial_state(self) -> State:
        return {"max": zero_scores(self.categories)}

    def score_text(self, text: str) -> Scores:
        """Item-level scores for one text as a scored role would get them."""
        model = self._require_model()
        if not text.strip():
            return zero_scores(self.categories)
        return {head: float(p) for head, p in zip(self.categories, model.score(text), strict=True)}

    def update(self, state: State, items: Sequence[Item]) -> Update:
        self._require_model()
        item_scores: list[Scores] = []
        tokens = 0
        for item in items:
            if item.scored and item.role in self.roles:
                item_scores.append(self.score_text(item.text))
                tokens += count_tokens(item.text)
            else:
                item_scores.append(zero_scores(self.categories))
        previous = state.get("max") or zero_scores(self.categories)
        scores = running_max(previous, item_scores)
        return Update(state={"max": dict(scores)}, item_scores=item_scores, scores=scores, tokens=tokens)
