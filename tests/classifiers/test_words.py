"""classifiers/words.py: the word list and the splice the extra view's passes share."""

from __future__ import annotations

import json

from deltaguard.classifiers import words
from deltaguard.models import MODELS_DIR


def test_the_word_list_is_the_tokenizers_whole_words():
    vocab = json.loads((MODELS_DIR / "minilm-tokenizer.json").read_text())["model"]["vocab"]
    expected = {w for w in vocab if w.isascii() and w.isalpha() and w.islower()}
    assert words.known_words() == expected


def test_a_splice_makes_each_change_in_order_and_counts_them():
    changes = [(0, 6, "IGNORE"), (11, 19, "prior")]
    assert words.spliced("ignore all previous", changes) == ("IGNORE all prior", 2)
    assert words.spliced("unchanged", []) == ("unchanged", 0)
