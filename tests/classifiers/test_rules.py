"""WindowedRuleClassifier's fast paths: each must find exactly what a plain scan finds."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deltaguard.classifiers.pii import PII_RULES, PiiClassifier
from deltaguard.classifiers.rules import MAX_SEEN, Buffer, _opaque
from deltaguard.classifiers.secrets import _JWT_HEADER, SECRET_RULES, SecretsClassifier
from deltaguard.parsing import parse_item

# Shapes of what the rules look for, without their context checks, so that generated
# text holds matches, near misses and values that meet at odd places.
SHAPES = [
    r"[+(]{0,2}[0-9][0-9 ().-]{5,22}[0-9]",
    r"[0-9](?:[ -]?[0-9]){12,18}",
    r"[0-9]{3}[- ][0-9]{2}[- ][0-9]{4}",
    r"[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]( ?)[0-9]{2}\1[0-9]{2}\1[0-9]{2}\1[A-D]",
    r"[XYZ0-9][0-9]{7}-?[A-Z]",
    r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?",
    r"[A-Za-z0-9._%+-]{1,70}@[A-Za-z0-9.-]{1,30}\.[A-Za-z]{2,6}",
    r"[\"']?[A-Za-z0-9_.-]{1,66}[\"']?[ \t]{0,5}(?:=>|:=|[:=]| )[ \t]{0,5}[\"'`]?[A-Za-z0-9_+/=.~-]{18,30}",
    r"[A-Za-z0-9_.-]{1,66}:?=[A-Za-z0-9_+/=.~-]{18,30}",
    r"[Bb][Ee][Aa][Rr][Ee][Rr][ \t]{1,3}[A-Za-z0-9._~+/-]{18,30}={0,2}",
    r"(?:AKIA|ASIA|ABIA|AIza|gh[pousr]_|github_pat_|glpat-|xox[abeprs]-)[A-Za-z0-9_-]{10,100}",
    r"(?:AccountKey|SharedAccessKey)[ \t]{0,2}=[ \t]{0,2}[A-Za-z0-9+/]{38,90}={0,2}",
    r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{20,32}",
    r"eyJ[A-Za-z0-9_-]{6,30}\.[A-Za-z0-9_-]{0,30}",
]
GLUE = ["", " ", "=", ":", "-", ".", "@", "+", "(", "_", "/", "\n", "\t", '"', "X", "A", "1", "é", "\x7f"]
# Each piece comes after a separator, or none.
texts = st.lists(
    st.tuples(
        st.sampled_from(GLUE),
        st.one_of(
            st.sampled_from(SHAPES).flatmap(lambda shape: st.from_regex(shape, fullmatch=True)),
            st.text(max_size=6),
        ),
    ),
    max_size=8,
).map(lambda pieces: "".join(glue + piece for glue, piece in pieces))

RULES = {f"secrets-{i}": rl for i, rl in enumerate(SECRET_RULES)} | {
    f"pii-{i}": rl for i, rl in enumerate(PII_RULES)
}


# Cases random text rarely builds.
EDGES = [
    "tel (+44) 20 7946 0958, +1 (415) 555-2671 or (415) 555-2671",
    "NI AB 12 34 56 C, AB123456C; NIE X1234567L, DNI 12345678-Z",
    "GB82 WEST 1234 5698 7654 32 and NL91ABNA0417164300",
    "SSN 536-22-1234 card 4111 1111 1111 1111 or 4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1",
    "a.b+c@example.co.uk, x@@y.io",
    "l" * 70 + "@mail.example.com",
    "m" * 64 + "@a.io " + "n" * 45 + "@b.io",
    'API_KEY=Zx9Qw2Lm8Rt4Vb7Np3Kd6Hs5 k = "Zx9Qw2Lm8Rt4Vb7Np3Kd6Hs5" pwd:=a==Zx9Qw2Lm8Rt4Vb7Np3Kd',
    '"secret" => `Zx9Qw2Lm8Rt4Vb7Np3Kd6Hs5` a/token=Zx9Qw2Lm8Rt4Vb7Np3Kd6Hs5 ' + "k" * 70 + "=v" * 12,
    "Authorization: BeArEr\t\tZx9Qw2Lm8Rt4Vb7Np3Kd6Hs5==",
    "AKIAIOSFODNN7EXAMPLE ASIASIASIAIOSFODNN7EXAMPLE xoxoxb-123456789012-abc",
    "AccountKey = " + "Ab+/" * 11 + " https://hooks.slack.com/services/T1234567/B1234567/" + "a" * 24,
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, lo=st.integers(0, 80))
@example(text=" ".join(EDGES), lo=0)
@example(text=" ".join(EDGES), lo=64)
def test_candidate_starts_include_every_match(text, lo):
    lo = min(lo, len(text))
    for name, rl in RULES.items():
        assert rl.starts is not None, name
        starts = list(rl.starts(Buffer(text, lo)))
        assert starts == sorted(set(starts)) and all(s >= lo for s in starts), name
        missed = {m.start() for m in rl.pattern.finditer(text, lo)} - set(starts)
        assert not missed, (name, missed)


class PlainSecrets(SecretsClassifier):
    rules = tuple(replace(rl, starts=None) for rl in SECRET_RULES)


class PlainPii(PiiClassifier):
    rules = tuple(replace(rl, starts=None) for rl in PII_RULES)


def tool(text: str):
    return parse_item({"type": "function_call_output", "call_id": "c1", "output": text})


@pytest.mark.parametrize(
    ("fast", "plain"), [(SecretsClassifier(), PlainSecrets()), (PiiClassifier(), PlainPii())]
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(texts, min_size=1, max_size=4))
def test_fast_scan_equals_plain_scan(fast, plain, pieces):
    a, b = fast.initial_state(), plain.initial_state()
    for text in pieces:
        ua, ub = fast.update(a, [tool(text)]), plain.update(b, [tool(text)])
        assert ua.findings == ub.findings and ua.item_scores == ub.item_scores and ua.tokens == ub.tokens
        assert json.dumps(ua.state) == json.dumps(ub.state)
        a, b = ua.state, ub.state


def test_fast_scan_equals_plain_scan_past_the_window():
    # Long runs of items cut the window (starts before CONTEXT_CHARS are skipped) and
    # overflow the remembered starts; both paths must agree on all of it.
    text = " ".join(
        ["a@b.co"] * 200 + ["AKIAIOSFODNN7EXAMPLE", "4111 1111 1111 1111", "pwd=Zx9Qw2Lm8Rt4Vb7Np3Kd"] * 30
    )
    for fast, plain in ((SecretsClassifier(), PlainSecrets()), (PiiClassifier(), PlainPii())):
        a, b = fast.initial_state(), plain.initial_state()
        seen = 0
        for i in range(0, len(text), 97):
            ua, ub = fast.update(a, [tool(text[i : i + 97])]), plain.update(b, [tool(text[i : i + 97])])
            assert ua.findings == ub.findings and json.dumps(ua.state) == json.dumps(ub.state)
            a, b = ua.state, ub.state
            seen = max(seen, len(a["streams"]["tool"]["seen"]))
        assert a["streams"]["tool"]["cut"] and a["counts"]
    assert seen == MAX_SEEN  # the PII stream overflowed


_JWT_HEADER_PLAIN = re.compile(r"(?<![A-Za-z0-9_.-])eyJ[A-Za-z0-9_-]{8,400}\.", re.ASCII)


@settings(max_examples=200, deadline=None)
@given(text=texts, pos=st.integers(0, 40))
def test_jwt_header_literal_first_is_the_same_pattern(text, pos):
    assert [m.span() for m in _JWT_HEADER.finditer(text, pos)] == [
        m.span() for m in _JWT_HEADER_PLAIN.finditer(text, pos)
    ]


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=0x7F)) | st.text())
def test_byte_table_helpers_match_their_regex_definitions(text):
    assert _opaque(text) == re.sub(r"[^\t\n\r\x20-\x7e]", "\x7f", text)
