"""SecretsClassifier: detectors, the cross-item window, the fold's invariants."""

from __future__ import annotations

import base64
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

from deltaguard.classifiers.rules import MAX_SEEN, TAIL_CHARS, redact
from deltaguard.classifiers.secrets import SecretsClassifier, looks_random
from deltaguard.parsing import parse_item

CLF = SecretsClassifier()
ALNUM = string.ascii_letters + string.digits

# Token-shaped fixtures are built at import from a seeded RNG rather than written out,
# so the repository holds no strings that secret scanners (or people) take for keys.
_rng = random.Random(20240601)


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def pem_block(label: str = "RSA ", lines: int = 20) -> str:
    body = "\n".join(base64.b64encode(_rng.randbytes(48)).decode() for _ in range(lines))
    return f"-----BEGIN {label}PRIVATE KEY-----\n{body}\n-----END {label}PRIVATE KEY-----"


AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example: the format is what counts
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + rand(36)
GITHUB_PAT = "github_pat_" + rand(22) + "_" + rand(59)
GITLAB = "glpat-" + rand(20)
SLACK = f"xoxb-{rand(12, string.digits)}-{rand(13, string.digits)}-{rand(24)}"
UPPER = string.ascii_uppercase
WEBHOOK = f"https://hooks.slack.com/services/T{rand(8, UPPER)}/B{rand(10, UPPER)}/{rand(24)}"
GCP_KEY = "AIza" + rand(35, ALNUM + "-_")
JWT = (
    b64url({"alg": "HS256", "typ": "JWT"})
    + "."
    + b64url({"sub": "1234567890", "name": "Jane Doe", "iat": 1516239022})
    + "."
    + rand(43, ALNUM + "-_")
)
LONG_JWT = b64url({"alg": "RS256", "kid": rand(16)}) + "." + b64url({"claims": rand(900)}) + "." + rand(342)
PEM = pem_block()
GCP_JSON = json.dumps(
    {
        "type": "service_account",
        "private_key_id": rand(40, "0123456789abcdef"),
        "private_key": pem_block("") + "\n",
    }
)
AZURE = (
    "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey="
    + base64.b64encode(_rng.randbytes(64)).decode()
    + ";EndpointSuffix=core.windows.net"
)
AZURE_SAS = "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=" + (
    base64.b64encode(_rng.randbytes(32)).decode()
)
GENERIC = "Zx9Qw2Lm8Rt4Vb7Np3Kd6Hs5"
BEARER = rand(40, ALNUM + "-._")

POSITIVES = [
    (f"export AWS_ACCESS_KEY_ID={AWS_KEY_ID}", "aws_access_key_id"),
    ("creds: ASIA" + rand(16, string.ascii_uppercase + string.digits), "aws_access_key_id"),
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key"),
    (f'{{"SecretAccessKey": "{AWS_SECRET}"}}', "aws_secret_access_key"),
    (f"maps key {GCP_KEY} in the page", "gcp_api_key"),
    (f"token {GITHUB}", "github_token"),
    (GITHUB_PAT, "github_token"),
    (f"git clone https://oauth2:{GITLAB}@gitlab.com/x/y.git", "gitlab_token"),
    (f"SLACK_BOT={SLACK}", "slack_token"),
    (f"post to {WEBHOOK}", "slack_webhook"),
    (f"Cookie: session={JWT}; path=/", "jwt"),
    (LONG_JWT, "jwt"),
    (f"here is my key:\n{PEM}\n", "private_key"),
    (pem_block("OPENSSH "), "private_key"),
    (pem_block("", lines=2), "private_key"),
    (GCP_JSON, "gcp_service_account_key"),
    (AZURE, "azure_storage_account_key"),
    (AZURE_SAS, "azure_shared_access_key"),
    (f'API_KEY = "{GENERIC}"', "generic_secret"),
    (f"db_password: {GENERIC}", "generic_secret"),
    (f'{{"clientSecret": "{GENERIC}"}}', "generic_secret"),
    (f"curl -H 'X-Api-Key: {GENERIC}'", "generic_secret"),
    (f"mysql --password={GENERIC}", "generic_secret"),
    ("SESSION_TOKEN=" + rand(32, "0123456789abcdef"), "generic_secret"),
    (f"Authorization: Bearer {BEARER}", "bearer_token"),
]

NEGATIVES = [
    "hello world, nothing to see here",
    'API_KEY = "your_api_key_here"',
    'password = "changeme"',
    "token: xxxxxxxxxxxxxxxxxxxxxxxx",
    "SECRET_KEY = EXAMPLEKEY1234567890abcdef",
    'api_key = "abcdefghijklmnopqrstuvwxyz"',  # one character class
    "password = aaaaaaaaaaaaaaaaaaaaaaaa1",
    "tokenizer_path = meta-llama/Llama-2-7b-hf",  # "token" inside a longer word
    "author = Someone Important The Third 2024",
    "token = request.headers.get('Authorization')",
    "password = os.environ['DB_PASSWORD']",
    "the token usage was 12345 tokens this month",
    "my_var = Zx9Qw2Lm8Rt4Vb7Np3Kd6Hs5",  # high entropy but not a credential name
    "Authorization: Bearer <token>",
    "Bearer eyJhbGciOiJIUzI1NiJ9",  # a JWT header alone
    "AKIAXXXXXXXXXXXXXXXX",
    "AKIAIOSFODNN7EXAMPLEX",  # 21 chars: not a key id
    "xoxb-your-token-goes-here",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "ghp_" + "x" * 36,
    "-----BEGIN RSA PRIVATE KEY-----\nthis is where the key goes, see docs.\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",  # too short for a key
    PEM[:-40],  # never completed
    "-----BEGIN CERTIFICATE-----\n" + base64.b64encode(bytes(600)).decode() + "\n-----END CERTIFICATE-----",
    b64url({"typ": "JWT"}) + "." + b64url({"sub": "1"}) + "." + rand(43),  # header without alg
    b64url({"alg": "none"}) + "." + b64url({"sub": "1"}) + ".",  # unsigned
    "AccountKey=" + "A" * 86 + "==",
    "",
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


@pytest.mark.parametrize(("text", "kind"), POSITIVES, ids=[k for _, k in POSITIVES])
def test_detects(text, kind):
    upd = run(text)
    assert kinds(upd) == [kind]
    expected = 0.8 if kind in ("generic_secret", "bearer_token") else 1.0
    assert upd.item_scores == [{"secrets": expected}] and upd.scores == {"secrets": expected}
    assert upd.state["counts"] == {kind: 1}


@pytest.mark.parametrize("text", NEGATIVES)
def test_ignores(text):
    upd = run(text)
    assert upd.findings == [], [(f.kind, f.preview) for f in upd.findings]
    assert upd.scores == {"secrets": 0.0}


def test_previews_never_show_the_secret():
    for text, _ in POSITIVES:
        for finding in run(text).findings:
            assert len(finding.preview.replace("…", "")) <= 8 or "PRIVATE KEY" in finding.preview
            assert finding.preview not in (AWS_KEY_ID, GITHUB, GENERIC, BEARER, JWT)
    assert redact(AWS_KEY_ID) == "AKIA…MPLE"
    assert redact("short") == "s…t" and redact("abc") == "…"


def test_looks_random_thresholds():
    assert looks_random(GENERIC)
    assert not looks_random(GENERIC[:19])  # too short
    assert not looks_random("a1" * 15)  # low entropy, repeats
    assert not looks_random("ZX9QW2LM8RT4VB7NP3KDEXAMPLE")


def test_several_findings_in_one_item_and_running_max():
    upd = run(f"{AWS_KEY_ID} and {GITHUB} and API_KEY={GENERIC}\n", "nothing\n", f"pwd: {GENERIC}")
    assert kinds(upd) == ["aws_access_key_id", "github_token", "generic_secret", "generic_secret"]
    assert [f.item_index for f in upd.findings] == [0, 0, 0, 2]
    assert upd.item_scores == [{"secrets": 1.0}, {"secrets": 0.0}, {"secrets": 0.8}]
    assert upd.scores == {"secrets": 1.0}
    assert upd.state["counts"] == {"aws_access_key_id": 1, "github_token": 1, "generic_secret": 2}


def test_repeated_secret_in_later_items_is_reported_again():
    # Distinct occurrences are distinct findings; only one occurrence split in two is one.
    upd = run(f"key {AWS_KEY_ID}", f"key {AWS_KEY_ID}")
    assert [f.item_index for f in upd.findings] == [0, 1]


# --- split across items ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        (AWS_KEY_ID, "aws_access_key_id"),
        (GITHUB, "github_token"),
        (GCP_KEY, "gcp_api_key"),
        (WEBHOOK, "slack_webhook"),
        (JWT, "jwt"),
        (LONG_JWT, "jwt"),
        (PEM, "private_key"),
        (GCP_JSON, "gcp_service_account_key"),
        (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key"),
    ],
)
def test_split_secret_found_once_where_it_completes(secret, kind):
    text = f"output:\n{secret}\nend of output"
    whole = run(text)
    assert kinds(whole) == [kind]
    for cut in sorted({1, len(secret) // 3, len(secret) // 2, len(secret) - 1}):
        at = len("output:\n") + cut  # inside the secret
        split = run(text[:at], text[at:])
        assert kinds(split) == [kind], cut
        assert split.state == whole.state
        if cut <= len(secret) // 2:  # the first half alone is never a valid secret
            assert split.findings[0].item_index == 1
            assert split.item_scores == [{"secrets": 0.0}, {"secrets": 1.0}]


def test_aws_key_id_split_as_in_the_brief():
    upd = run("first tool output ends with AKIAIOSF", "ODNN7EXAMPLE starts the next one")
    found = [(f.kind, f.item_index, f.preview) for f in upd.findings]
    assert found == [("aws_access_key_id", 1, "AKIA…MPLE")]


def test_pem_split_in_many_pieces_and_across_calls():
    text = f"key:\n{PEM}\ndone"
    pieces = [text[i : i + 37] for i in range(0, len(text), 37)]
    upd = run(*pieces)
    assert kinds(upd) == ["private_key"]
    end = text.index("-----END") + len("-----END RSA PRIVATE KEY-----")
    assert upd.findings[0].item_index == (end - 1) // 37  # the piece holding the END marker's last char
    state = CLF.initial_state()
    found = []
    for piece in pieces:  # one update call per item, as delta mode does
        step = CLF.update(state, [tool(piece)])
        found += step.findings
        state = step.state
    assert [f.kind for f in found] == ["private_key"] and state == upd.state


def test_match_touching_the_boundary_then_growing_is_one_finding():
    # The first item ends with a complete, valid value; the next one extends it.
    first = f'API_KEY = "{GENERIC}'
    upd = run(first, 'Q7w"\nmore text')
    assert kinds(upd) == ["generic_secret"] and upd.findings[0].item_index == 0
    assert run(first + 'Q7w"\nmore text').state == upd.state
    # Same for a GitLab token (variable length) and a Slack token.
    for token in (GITLAB + rand(10), SLACK):
        cut = len(token) - 5
        upd = run(f"t {token[:cut]}", f"{token[cut:]} x")
        assert len(upd.findings) == 1 and upd.findings[0].item_index == 0
        assert upd.state == run(f"t {token} x").state


def test_unscored_items_between_parts_do_not_break_the_window():
    items = [tool("ends with AKIAIOSF"), unscored("ODNN7 noise"), unscored(), tool("ODNN7EXAMPLE here")]
    upd = CLF.update(CLF.initial_state(), items)
    assert [(f.kind, f.item_index) for f in upd.findings] == [("aws_access_key_id", 3)]
    assert upd.item_scores == [{"secrets": 0.0}, {"secrets": 0.0}, {"secrets": 0.0}, {"secrets": 1.0}]
    assert upd.tokens == CLF.update(CLF.initial_state(), [items[0], items[3]]).tokens


def test_empty_scored_item_changes_nothing():
    a = run(f"pre {AWS_KEY_ID[:6]}")
    b = CLF.update(a.state, [tool("")])
    assert b.findings == [] and b.state == a.state and b.tokens == 0


def test_tokens_count_the_window():
    upd = run("alpha beta", "gamma")
    assert upd.tokens == 2 + (2 + 1)  # "alpha beta", then the tail "alpha beta" + "gamma"
    assert run("x" * (TAIL_CHARS + 10), "y").tokens == 1 + (1 + 1)


# --- fold invariants ------------------------------------------------------------------

SEQUENCES = [
    [tool("ends with AKIAIOSF"), tool("ODNN7EXAMPLE"), msg(f"token {GITHUB}")],
    [msg(PEM[:300]), unscored(), tool(PEM[300:900]), tool(PEM[900:]), msg("bye")],
    [msg(f"Bearer {BEARER[:10]}"), msg(BEARER[10:]), msg(JWT[:30]), msg(JWT[30:]), msg("")],
    [tool(f'API_KEY="{GENERIC}'), tool('abc"'), tool(AZURE[:60]), tool(AZURE[60:]), unscored()],
]


@pytest.mark.parametrize("items", SEQUENCES)
def test_associative_over_item_boundaries(items):
    s0 = CLF.initial_state()
    whole = CLF.update(s0, items)
    for cut in range(len(items) + 1):
        head = CLF.update(s0, items[:cut])
        rest = CLF.update(head.state, items[cut:])
        assert rest.state == whole.state
        assert head.item_scores + rest.item_scores == whole.item_scores
        assert rest.scores == whole.scores
        shifted = [f.__class__(f.category, f.kind, f.item_index + cut, f.preview) for f in rest.findings]
        assert head.findings + shifted == whole.findings
        assert head.tokens + rest.tokens == whole.tokens


def test_update_is_pure_and_json_state():
    state = CLF.update(CLF.initial_state(), SEQUENCES[1][:2]).state
    frozen = copy.deepcopy(state)
    a = CLF.update(state, SEQUENCES[1][2:])
    b = CLF.update(json.loads(json.dumps(state)), SEQUENCES[1][2:])
    assert state == frozen and a.state == b.state and a.findings == b.findings
    assert a.state is not state and a.state["scores"] is not a.scores


# Fragments for the split property: each is found the same way whatever the cut,
# as long as separators keep neighbours apart (a digit or letter right after a token
# could legitimately change what the token is).
FRAGMENTS = [
    AWS_KEY_ID,
    GITHUB,
    GITLAB,
    SLACK,
    WEBHOOK,
    GCP_KEY,
    JWT,
    pem_block(lines=8),
    GCP_JSON,
    AZURE,
    f'API_KEY = "{GENERIC}"',
    f"aws_secret_access_key = {AWS_SECRET}",
    f"Authorization: Bearer {BEARER}",
    "hello there",
    "the token was",
    'password = "changeme"',
    "-----BEGIN PRIVATE KEY-----",
    "lorem ipsum dolor",
    "näive café 🔑",
]
SEPARATORS = ["\n", ", ", "; ", " | "]


@st.composite
def split_texts(draw):
    parts = draw(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6))
    seps = draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(parts), max_size=len(parts)))
    text = "".join(p + s for p, s in zip(parts, seps, strict=True))
    cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), max_size=8)))
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in pairwise(bounds)]
    gaps = draw(st.lists(st.booleans(), min_size=len(pieces), max_size=len(pieces)))
    return text, pieces, gaps


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    filler = "".join(random.Random(5).choices(ALNUM + " =:_-./\n\"'", k=1_000_000))
    text = filler[:500_000] + f" {AWS_KEY_ID} " + filler[500_000:] + f"\nAPI_KEY={GENERIC}\n{PEM}"
    t0 = time.perf_counter()
    upd = run(text)
    assert time.perf_counter() - t0 < 5
    assert {"aws_access_key_id", "generic_secret", "private_key"} <= set(kinds(upd))
    assert len(json.dumps(upd.state)) <= CLF.max_state_bytes


def test_state_bound_under_adversarial_text():
    cases = [
        '"\\' * 2000,  # every tail char escapes to two JSON bytes
        (f"{AWS_KEY_ID} " * 200) + f"pwd={GENERIC} " * 100,  # findings everywhere
        "-----BEGIN EC PRIVATE KEY-----\n" + "A" * 300_000,  # a block that never ends
        JWT[:-20] + "x" * 300_000,  # a token that never ends
        "\u202e\U0001f525\x00" * 5000,
    ]
    state = CLF.initial_state()
    for text in cases:
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            state = CLF.update(state, [tool(piece)]).state
            assert len(json.dumps(state)) <= CLF.max_state_bytes
            stream = state["streams"]["tool"]
            assert len(stream["seen"]) <= MAX_SEEN and len(stream["tail"]) <= TAIL_CHARS
    assert state["counts"]["aws_access_key_id"] == 200


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=300), min_size=1, max_size=4))
def test_odd_unicode_never_crashes(texts):
    texts = [t + "\u200f\x00🔑" for t in texts]
    upd = CLF.update(CLF.initial_state(), [msg(t) for t in texts])
    assert all(0.0 <= s["secrets"] <= 1.0 for s in upd.item_scores)
    assert len(json.dumps(upd.state)) <= CLF.max_state_bytes
    assert json.loads(json.dumps(upd.state)) == upd.state


def test_split_across_tool_outputs_with_a_tool_call_between_is_found_once():
    call = parse_item(
        {"type": "function_call", "call_id": "c2", "name": "cat", "arguments": '{"path": ".env.2"}'}
    )
    items = [tool("AWS_ACCESS_KEY_ID=AKIAIOSF"), call, tool("ODNN7EXAMPLE\nTIMEOUT=30")]
    upd = CLF.update(CLF.initial_state(), items)
    assert [f.item_index for f in upd.findings] == [2]
    assert [s["secrets"] for s in upd.item_scores] == [0.0, 0.0, 1.0]
