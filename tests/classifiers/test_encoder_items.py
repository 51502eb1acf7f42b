"""The encoder classifier's memo of item results, alone (the classifier using it:
test_encoder.py, test_memo_returns_the_same_update_and_stays_bounded)."""

from __future__ import annotations

from deltaguard.classifiers.encoder_items import ItemMemo, ItemResult


def test_a_result_is_keyed_by_its_text_and_the_context_it_was_read_in():
    keys = {ItemMemo.key("a", ()), ItemMemo.key("b", ()), ItemMemo.key("a", (1,)), ItemMemo.key("a", (2,))}
    assert len(keys) == 4 and ItemMemo.key("a", (1,)) == ItemMemo.key("a", [1])
    assert ItemMemo.key("\ud800 lone surrogate", ())  # no text is refused


def test_the_memo_keeps_the_most_recently_used_and_no_more():
    memo = ItemMemo(2)
    results = [ItemResult((float(i),), i) for i in range(3)]
    keys = [ItemMemo.key(str(i), ()) for i in range(3)]
    memo.put(keys[0], results[0])
    memo.put(keys[1], results[1])
    assert memo.get(keys[0]) == results[0]  # now the most recent
    memo.put(keys[2], results[2])
    assert memo.get(keys[1]) is None and memo.get(keys[0]) == results[0] and memo.get(keys[2]) == results[2]


def test_a_memo_of_size_zero_keeps_nothing():
    memo = ItemMemo(0)
    memo.put(ItemMemo.key("a", ()), ItemResult((0.5,), 3))
    assert memo.get(ItemMemo.key("a", ())) is None
