"""PiiClassifier: detectors, validators, the cross-item window, the fold's invariants."""

from __future__ import annotations

import copy
import json
import random
import string
import time
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaguard.classifiers.base import Finding
from deltaguard.classifiers.pii import PiiClassifier, iban_ok, luhn_ok
from deltaguard.classifiers.rules import MAX_SEEN, TAIL_CHARS
from deltaguard.parsing import parse_item

CLF = PiiClassifier()

POSITIVES = [
    ("mail alice.smith@example.com today", "email"),
    ("Jane <jane.doe+news@mail.example.co.uk>", "email"),
    ("call +1 415 555 2671", "phone"),
    ("tel. +44 20 7946 0958.", "phone"),
    ("+14155552671", "phone"),
    ("+1 (415) 555-2671", "phone"),
    ("office: (415) 555-2671", "phone"),
    ("415-555-2671", "phone"),
    ("415.555.2671", "phone"),
    ("1-800-555-0199", "phone"),
    ("020 7946 0958", "phone"),
    ("07911 123456", "phone"),
    ("01 23 45 67 89", "phone"),
    ("card 4111 1111 1111 1111 exp 12/27", "payment_card"),
    ("5555-5555-5555-4444", "payment_card"),
    ("amex 3782 822463 10005", "payment_card"),
    ("6011111111111117", "payment_card"),
    ("2223003122003222", "payment_card"),
    ("4222222222222", "payment_card"),  # 13-digit Visa
    ("IBAN DE89 3704 0044 0532 0130 00", "iban"),
    ("GB82 WEST 1234 5698 7654 32", "iban"),
    ("FR14 2004 1010 0505 0001 3M02 606", "iban"),
    ("NL91ABNA0417164300", "iban"),
    ("BE68 5390 0754 7034 THEN", "iban"),  # a 4-letter word after a 16-char IBAN
    ("SSN: 536-22-1234", "us_ssn"),
    ("ssn 536 22 1234", "us_ssn"),
    ("NI number AB 12 34 56 C", "uk_nino"),
    ("AB123456C", "uk_nino"),
    ("DNI 12345678Z", "es_dni"),
    ("12345678-Z", "es_dni"),
    ("NIE X1234567L", "es_nie"),
]

NEGATIVES = [
    "hello world",
    "user@localhost",
    "logo@2x.png",
    "foo..bar@example.com",
    "git@ is not an email",
    "192.168.100.200",
    "10.0.0.1 and 255.255.255.0",
    "released 2024-01-15",
    "at 01.02.2024 10:30",
    "on 15/01/2024",
    "version 1.2.3 and v10.0.19041.1234",
    "timestamp 1700000000",
    "4155552671",  # a bare national digit run: ids and timestamps look the same
    "07911123456",
    "555-0100",  # too short
    "000 000 0000",
    "4111 1111 1111 1112",  # Luhn fails
    "order number 9283746501928374",
    "4111111111111111111111",  # too long
    "4111 1111-1111 1111",  # mixed separators
    "1234 5678 9012 3456",  # no known IIN
    "DE88 3704 0044 0532 0130 00",  # wrong checksum
    "DE89 3704 0044 0532 0130",  # wrong length for DE
    "XX89 3704 0044 0532 0130 00",  # unknown country
    "000-12-3456",
    "666-12-3456",
    "900-12-3456",
    "123-00-4567",
    "123-45-0000",
    "536-22 1234",  # inconsistent separators
    "QQ 12 34 56 C",  # HMRC's example prefix is not allocated
    "BG123456A",
    "AB123456E",
    "AB 123456 C",
    "12345678A",  # wrong DNI letter
    "X1234567A",
    "00000000T",
]


def msg(text: str):
    return parse_item({"role": "user", "content": text})


def tool(text: str):
    return parse_item({"type": "function_call_output", "call_id": "c1", "output": text})


def unscored(text: str = ""):
    """An item with no text to score (it only points at another item)."""
    return parse_item({"type": "item_reference", "id": f"msg_{len(text)}"})


def run(*texts: str, state=None):
    state = CLF.initial_state() if state is None else state
    return CLF.update(state, [tool(t) for t in texts])


def kinds(upd) -> list[str]:
    return [f.kind for f in upd.findings]


SCORES = {"email": 0.8, "phone": 0.7, "us_ssn": 0.9, "uk_nino": 0.9}


@pytest.mark.parametrize(("text", "kind"), POSITIVES, ids=[t for t, _ in POSITIVES])
def test_detects(text, kind):
    upd = run(text)
    assert kinds(upd) == [kind]
    expected = SCORES.get(kind, 1.0)
    assert upd.item_scores == [{"pii": expected}] and upd.scores == {"pii": expected}
    assert upd.state["counts"] == {kind: 1}


@pytest.mark.parametrize("text", NEGATIVES)
def test_ignores(text):
    upd = run(text)
    assert upd.findings == [], [(f.kind, f.preview) for f in upd.findings]
    assert upd.scores == {"pii": 0.0}


def test_validators():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert luhn_ok("79927398713")
    assert iban_ok("GB82WEST12345698765432") and not iban_ok("GB82WEST12345698765433")
    assert not iban_ok("GB82WEST1234569876543")  # length


def test_iban_digits_are_not_also_a_phone_or_card():
    upd = run("pay NL91 ABNA 0417 1643 00 and LU28 0019 4006 4475 0000 now")
    assert kinds(upd) == ["iban", "iban"]


def test_previews_are_redacted():
    upd = run("4111 1111 1111 1111, alice.smith@example.com, 536-22-1234, DE89 3704 0044 0532 0130 00")
    previews = [f.preview for f in upd.findings]
    assert previews == ["4111…1111", "alic….com", "53…34", "DE89…0 00"]


def test_several_findings_and_running_max():
    upd = run("phone +44 20 7946 0958\n", "nothing here\n", "card 4111 1111 1111 1111 and bob@example.org")
    assert kinds(upd) == ["phone", "payment_card", "email"]
    assert [f.item_index for f in upd.findings] == [0, 2, 2]
    assert upd.item_scores == [{"pii": 0.7}, {"pii": 0.0}, {"pii": 1.0}]
    assert upd.scores == {"pii": 1.0}


# --- split across items ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("4111 1111 1111 1111", "payment_card"),
        ("DE89 3704 0044 0532 0130 00", "iban"),
        ("alice.smith@example.com", "email"),
        ("+44 20 7946 0958", "phone"),
        ("536-22-1234", "us_ssn"),
        ("AB 12 34 56 C", "uk_nino"),
        ("12345678Z", "es_dni"),
    ],
)
def test_split_value_found_once(value, kind):
    text = f"record: {value}\nnext line"
    whole = run(text)
    assert kinds(whole) == [kind]
    for cut in range(1, len(value)):
        at = len("record: ") + cut
        split = run(text[:at], text[at:])
        assert kinds(split) == [kind], cut
        assert split.state == whole.state, cut
    # In the middle the first part alone is not valid: found where it completes.
    at = len("record: ") + len(value) // 2
    split = run(text[:at], text[at:])
    assert split.findings[0].item_index == 1 and split.item_scores[0] == {"pii": 0.0}


def test_card_split_exactly_at_a_group_boundary():
    upd = run("card 4111 1111", " 1111 1111 thanks")
    assert [(f.kind, f.item_index) for f in upd.findings] == [("payment_card", 1)]


def test_value_complete_at_boundary_then_extended_is_one_finding():
    # "bob@example.co" is a valid address on its own; the next item makes it ".com".
    upd = run("write to bob@example.co", "m please")
    assert kinds(upd) == ["email"] and upd.findings[0].item_index == 0
    assert upd.state == run("write to bob@example.com please").state


def test_unscored_items_between_parts():
    items = [tool("card 4111 1111"), unscored(), unscored("x"), tool(" 1111 1111 ok")]
    upd = CLF.update(CLF.initial_state(), items)
    assert [(f.kind, f.item_index) for f in upd.findings] == [("payment_card", 3)]
    assert [s["pii"] for s in upd.item_scores] == [0.0, 0.0, 0.0, 1.0]


def test_a_luhn_failing_number_split_in_two_is_still_not_a_card():
    upd = run("order 4111 1111", " 1111 1112 shipped")
    assert upd.findings == []


# --- fold invariants ------------------------------------------------------------------

SEQUENCES = [
    [tool("card 4111 1111"), tool(" 1111 1111\n"), msg("mail bob@example.org"), unscored()],
    [msg("IBAN GB82 WEST 1234"), msg(" 5698 7654 32"), msg(""), msg("SSN 536-22-"), msg("1234 ok")],
    [tool("+44 20 79"), unscored(), tool("46 0958, AB 12 34"), tool(" 56 C and 12345678"), tool("Z.")],
]


@pytest.mark.parametrize("items", SEQUENCES)
def test_associative_over_item_boundaries(items):
    s0 = CLF.initial_state()
    whole = CLF.update(s0, items)
    assert whole.findings
    for cut in range(len(items) + 1):
        head = CLF.update(s0, items[:cut])
        rest = CLF.update(head.state, items[cut:])
        assert rest.state == whole.state
        assert head.item_scores + rest.item_scores == whole.item_scores
        assert rest.scores == whole.scores
        shifted = [Finding(f.category, f.kind, f.item_index + cut, f.preview) for f in rest.findings]
        assert head.findings + shifted == whole.findings
        assert head.tokens + rest.tokens == whole.tokens


def test_update_is_pure_and_json_state():
    state = CLF.update(CLF.initial_state(), SEQUENCES[1][:2]).state
    frozen = copy.deepcopy(state)
    a = CLF.update(state, SEQUENCES[1][2:])
    b = CLF.update(json.loads(json.dumps(state)), SEQUENCES[1][2:])
    assert state == frozen and a.state == b.state and a.findings == b.findings
    assert a.state is not state and a.state["scores"] is not a.scores


# Values are kept apart by separators without digits or letters: "2671 4111…" would be
# one longer number in a single item, and is legitimately read differently when cut.
FRAGMENTS = [
    "alice.smith@example.com",
    "jane.doe@mail.example.co.uk",
    "+1 415 555 2671",
    "+44 20 7946 0958",
    "(415) 555-2671",
    "020 7946 0958",
    "4111 1111 1111 1111",
    "5555-5555-5555-4444",
    "378282246310005",
    "DE89 3704 0044 0532 0130 00",
    "NL91 ABNA 0417 1643 00",
    "GB82WEST12345698765432",
    "536-22-1234",
    "AB 12 34 56 C",
    "12345678Z",
    "X1234567L",
    "order 9283746501928374",
    "version 1.2.3",
    "released 2024-01-15",
    "hello there",
    "Ωμέγα 你好 🔥",
]
SEPARATORS = ["\n", ", ", "; ", " | "]


@st.composite
def split_texts(draw):
    parts = draw(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8))
    seps = draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(parts), max_size=len(parts)))
    text = "".join(p + s for p, s in zip(parts, seps, strict=True))
    cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), max_size=10)))
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in pairwise(bounds)]
    gaps = draw(st.lists(st.booleans(), min_size=len(pieces), max_size=len(pieces)))
    return text, pieces, gaps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_texts())
def test_random_splits_find_the_same_as_one_item(case):
    text, pieces, gaps = case
    one = CLF.update(CLF.initial_state(), [tool(text)])
    items = []
    for piece, gap in zip(pieces, gaps, strict=True):
        items.append(tool(piece))
        if gap:
            items.append(unscored())
    many = CLF.update(CLF.initial_state(), items)
    assert Counter(kinds(many)) == Counter(kinds(one))
    assert many.scores == one.scores
    assert many.state == one.state


# --- robustness -----------------------------------------------------------------------


def test_huge_item_is_fast_and_state_bounded():
    rng = random.Random(3)
    filler = "".join(rng.choices(string.ascii_letters + string.digits + " .-@+()\n", k=1_000_000))
    text = filler[:500_000] + " alice.smith@example.com " + filler[500_000:] + "\nSSN 536-22-1234\n"
    t0 = time.perf_counter()
    upd = run(text)
    assert time.perf_counter() - t0 < 5
    assert {"email", "us_ssn"} <= set(kinds(upd))
    assert len(json.dumps(upd.state)) <= CLF.max_state_bytes


def test_state_bound_under_adversarial_text():
    cases = [
        '"\\' * 2000,
        "a@b.co " * 20_000,  # a finding every 7 characters
        "4111 1111 1111 1111\n" * 2000,
        "\u202e\U0001f525\x00" * 5000,
        "1" * 300_000,
    ]
    state = CLF.initial_state()
    for text in cases:
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            state = CLF.update(state, [tool(piece)]).state
            assert len(json.dumps(state)) <= CLF.max_state_bytes
            stream = state["streams"]["tool"]
            assert len(stream["seen"]) <= MAX_SEEN and len(stream["tail"]) <= TAIL_CHARS
    assert state["counts"]["email"] == 20_000 and state["counts"]["payment_card"] == 2000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=300), min_size=1, max_size=4))
def test_odd_unicode_never_crashes(texts):
    texts = [t + "\u200f\x00٣٤٥ ４１１１" for t in texts]  # RTL mark, NUL, non-ASCII digits
    upd = CLF.update(CLF.initial_state(), [msg(t) for t in texts])
    assert all(0.0 <= s["pii"] <= 1.0 for s in upd.item_scores)
    assert len(json.dumps(upd.state)) <= CLF.max_state_bytes
    assert json.loads(json.dumps(upd.state)) == upd.state


def test_non_ascii_digits_are_not_numbers():
    assert run("٤١١١ ١١١١ ١١١١ ١١١١ and ４１１１１１１１１１１１１１１１").findings == []
