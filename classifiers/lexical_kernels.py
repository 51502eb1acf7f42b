"""Compiled featurisation and scoring of the lexical model (numba, nopython mode).

The gate lane scores every user message and tool output before the request goes on, so
the lexical model's cost is on the critical path of each turn. These kernels walk a
text's code points once per block, in compiled loops: no per-n-gram Python and none of
the intermediate arrays a numpy pass needs. classifiers/lexical.py builds the tables
they read and checks them against scikit-learn (tests/classifiers/test_lexical.py).

Each text (a segment: " " + lowercased text + " ", as sklearn's char_wb pads a word) is
scored on its own: its n-grams are counted in a scratch hash table and summed in order of
first occurrence, so its logits are the same to the bit whatever other texts share the
call. Vocabulary tables are open-addressing hash tables of (key, value) rows, probed
linearly from a key's home slot to an empty row (key 0): every probe compares the stored
key itself, so a hash can cost time but never returns a wrong value. Compiled at model
load, never at import (numba caches the machine code on disk: beside this file, or in the
user's cache directory when this one is read-only); `nogil`, so threads scoring different
texts run in parallel.
"""

from __future__ import annotations

import math

import numba
import numpy as np

HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing (2^64 / golden ratio)
POLY_BASE = np.uint64(0xC2B2AE3D27D4EB4F)  # token hashes: sum(code point * BASE**i) mod 2^64

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")


@_jit
def probe(table: np.ndarray, shift: np.uint64, key: np.uint64) -> int:
    """The value stored for `key` in an open-addressing table, -1 if it is absent."""
    slot = (key * HASH_MULTIPLIER) >> shift
    while True:
        stored = table[slot, 0]
        if stored == key:
            return np.int64(table[slot, 1])
        if stored == 0:
            return -1
        slot += np.uint64(1)


@_jit
def _scratch(keys: int) -> tuple[np.ndarray, np.uint64, np.ndarray]:
    """A counting table for up to `keys` distinct keys (load factor <= 1/2), its shift,
    and room for the slots of the distinct keys in order of first occurrence."""
    bits = 4
    while (1 << bits) < 2 * keys:
        bits += 1
    return np.zeros((1 << bits, 2), dtype=np.uint64), np.uint64(64 - bits), np.empty(keys, dtype=np.int64)


@_jit
def _tally(scratch: np.ndarray, shift: np.uint64, distinct: np.ndarray, n: int, key: np.uint64) -> int:
    """Counts one occurrence of the nonzero `key`; returns the number of distinct keys.

    A hash table, not a sort (numba's sort is several times slower than numpy's): the
    text's n-grams are counted in one pass over them, in a table sized for the call's
    longest text. The distinct keys are listed in order of first occurrence, which depends
    on this segment's text alone (not on the table's size)."""
    mask = np.uint64(scratch.shape[0] - 1)
    slot = (key * HASH_MULTIPLIER) >> shift
    while True:
        stored = scratch[slot, 0]
        if stored == key:
            scratch[slot, 1] += np.uint64(1)
            return n
        if stored == 0:
            scratch[slot, 0] = key
            scratch[slot, 1] = 1
            distinct[n] = slot
            return n + 1
        slot = (slot + np.uint64(1)) & mask


@_jit
def _tf_idf(weights: np.ndarray, feature: int, count: int, acc: np.ndarray) -> float:
    """acc += coef . tf-idf of one feature occurring `count` times; returns its value**2.

    `weights` rows are (idf, coef of each head) per feature: one cache line holds all a
    feature needs. Most n-grams of a segment occur once, and log(1) + 1 is 1 exactly: no log
    for them (about a tenth of the char block's time on real tool outputs)."""
    idf = weights[feature, 0]
    value = idf if count == 1 else (math.log(count) + 1.0) * idf  # sublinear tf
    for h in range(acc.shape[0]):
        acc[h] += weights[feature, 1 + h] * value
    return value * value


@_jit
def _add_normalised(acc: np.ndarray, norm2: float, out_row: np.ndarray) -> None:
    """out_row += acc / ||tf-idf||: the dot product with the l2-normalised vector."""
    if norm2 > 0.0:
        norm = math.sqrt(norm2)
        for h in range(acc.shape[0]):
            out_row[h] += acc[h] / norm


@_jit
def char_logits(
    points: np.ndarray,
    bounds: np.ndarray,
    codes: np.ndarray,
    space_code: int,
    lo: int,
    hi: int,
    code_bits: int,
    table: np.ndarray,
    shift: np.uint64,
    weights: np.ndarray,
    out: np.ndarray,
) -> None:
    """Adds the char block's logits of each segment points[bounds[s]:bounds[s+1]] to out[s].

    sklearn's char_wb n-grams of a text are the windows of its padded words. With every
    whitespace character coded as " ", those are the windows of lo..hi characters whose
    characters are all in the model's alphabet (code != 0) and whose inner characters are
    not spaces; any other window could not match the vocabulary. A window packs its codes
    into one uint64, first character lowest, as the vocabulary's n-grams are packed.
    """
    longest = 0
    for s in range(bounds.shape[0] - 1):
        longest = max(longest, bounds[s + 1] - bounds[s])
    scratch, scratch_shift, distinct = _scratch(longest * (hi - lo + 1))
    acc = np.empty(out.shape[1])
    for s in range(bounds.shape[0] - 1):
        start, end = bounds[s], bounds[s + 1]
        n = 0
        for i in range(start, end - lo + 1):
            code = codes[points[i]]
            if code == 0:
                continue
            key = np.uint64(code)
            for j in range(1, min(hi, end - i)):
                code = codes[points[i + j]]
                if code == 0:
                    break
                key |= np.uint64(code) << np.uint64(code_bits * j)
                if j + 1 >= lo:
                    n = _tally(scratch, scratch_shift, distinct, n, key)
                if code == space_code:  # a space ends a window: inside one it ends the word
                    break
        acc[:] = 0.0
        norm2 = 0.0
        for d in range(n):  # one vocabulary probe per distinct n-gram
            slot = distinct[d]
            feature = probe(table, shift, scratch[slot, 0])
            if feature >= 0:
                norm2 += _tf_idf(weights, feature, np.int64(scratch[slot, 1]), acc)
            scratch[slot, 0] = 0  # the table is empty again for the next segment
        _add_normalised(acc, norm2, out[s])


@_jit
def word_logits(
    points: np.ndarray,
    bounds: np.ndarray,
    is_word: np.ndarray,
    tokens: np.ndarray,
    token_shift: np.uint64,
    token_chars: np.ndarray,
    token_start: np.ndarray,
    token_len: np.ndarray,
    unigram: np.ndarray,
    pairs: np.ndarray,
    pair_shift: np.uint64,
    bigrams: bool,
    weights: np.ndarray,
    out: np.ndarray,
) -> None:
    """Adds the word block's logits of each segment to out[s].

    sklearn's token_pattern (?u)\\b\\w\\w+\\b: every maximal run of >= 2 word characters.
    A run is identified by its polynomial hash among the vocabulary's tokens and kept only
    if it spells that token, character by character, so a hash collision cannot turn one
    token into another. Bigrams pair each token with the previous one (both known).
    """
    longest = 0
    for s in range(bounds.shape[0] - 1):
        longest = max(longest, bounds[s + 1] - bounds[s])
    scratch, scratch_shift, distinct = _scratch(longest + 1)  # <= a unigram and a bigram per 3 chars
    acc = np.empty(out.shape[1])
    one = np.uint64(1)
    for s in range(bounds.shape[0] - 1):
        start, end = bounds[s], bounds[s + 1]
        n = 0
        previous = -1
        i = start
        while i < end:
            if not is_word[points[i]]:
                i += 1
                continue
            run_start = i
            h = np.uint64(0)
            power = one
            while i < end and is_word[points[i]]:
                h += np.uint64(points[i]) * power
                power *= POLY_BASE
                i += 1
            length = i - run_start
            if length < 2:
                continue
            token = probe(tokens, token_shift, h)
            if token >= 0 and token_len[token] != length:
                token = -1
            if token >= 0:
                at = token_start[token]
                for j in range(length):
                    if points[run_start + j] != token_chars[at + j]:
                        token = -1
                        break
            if token >= 0:
                feature = unigram[token]
                if feature >= 0:  # features are counted as feature + 1: keys are nonzero
                    n = _tally(scratch, scratch_shift, distinct, n, np.uint64(feature + 1))
                if bigrams and previous >= 0:
                    key = (np.uint64(previous + 1) << np.uint64(32)) | np.uint64(token + 1)
                    feature = probe(pairs, pair_shift, key)
                    if feature >= 0:
                        n = _tally(scratch, scratch_shift, distinct, n, np.uint64(feature + 1))
            previous = token
        acc[:] = 0.0
        norm2 = 0.0
        for d in range(n):
            slot = distinct[d]
            norm2 += _tf_idf(weights, np.int64(scratch[slot, 0]) - 1, np.int64(scratch[slot, 1]), acc)
            scratch[slot, 0] = 0
        _add_normalised(acc, norm2, out[s])
