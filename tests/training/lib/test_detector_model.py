"""The detector's kept vocabulary: the unknown token's row first, then the special tokens,
the tokenizer's most probable pieces and every piece the training windows use."""

from __future__ import annotations

import json

from training.lib import detector_model


def test_the_kept_rows_are_the_unknown_token_then_specials_frequent_and_trained(tmp_path):
    vocab = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    vocab += [[f"p{i}", -float(i)] for i in range(4, 40)]  # p4 the most probable
    vocab += [["<mask>", 0.0]]
    specials = [{"id": i, "content": p, "special": True} for i, (p, _) in enumerate(vocab) if p[0] == "<"]
    model = {"type": "Unigram", "unk_id": 3, "vocab": vocab}
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(json.dumps({"added_tokens": specials, "model": model}))
    keep = detector_model.kept_vocabulary([{"ids": [0, 30, 31, 2]}, {"ids": [0, 39, 2]}], tokenizer, 8)
    assert keep[0] == 3
    assert list(keep[1:]) == sorted(keep[1:]) and len(set(keep)) == len(keep)
    assert {0, 1, 2, 4, 5, 6, 30, 31, 39, 40} <= set(keep)
    assert not {20, 35} & set(keep)
