"""The harm recipe's derived rows (training/lib/harm_rows.py)."""

from training.corpus.harm import NEUTRAL_INSULTS, HarmRow
from training.lib.harm_rows import INSULT_TWINS, insult_twins, split_of


def chat_rows(n: int, split: str) -> list[HarmRow]:
    """n chat rows of `split` that say "a movie", "a garden" and "a idiot"."""
    rows = []
    i = 0
    while len(rows) < n:
        row = HarmRow("we saw a movie in a garden, what a idiot", frozenset(), "chitchat", "chat", f"c{i}")
        if split_of(row) == split:
            rows.append(row)
        i += 1
    return rows


def profanity(term: str) -> HarmRow:
    return HarmRow(f"you {term}", frozenset({"harassment"}), "profanity", "toxic", f"profanity:{term}", 0.5)


def test_twins_fill_the_neutral_templates_with_ordinary_words_of_train_chat():
    base = [*chat_rows(3, "train"), profanity("idiot"), profanity("moron")]
    twins = insult_twins(base)
    assert len(twins) == 2 * INSULT_TWINS
    allowed = {t.format(t=w) for t in NEUTRAL_INSULTS for w in ("movie", "garden")}
    for twin in twins:
        assert not twin.harmful and twin.shape == "twin"
        assert twin.text in allowed  # never the term itself, though chat says "a idiot"
    assert {t.group for t in twins} == {"profanity:idiot", "profanity:moron"}  # split with the term
    assert twins == insult_twins(base)


def test_a_word_only_held_out_chat_says_is_no_filler():
    base = [*chat_rows(2, "train"), *chat_rows(3, "test"), profanity("idiot")]
    assert insult_twins(base) == []  # said five times, only twice in train chat
