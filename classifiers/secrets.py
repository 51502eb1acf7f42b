"""Secrets classifier: credentials in transcript text, found by validated rules.

Structured detectors (score 1.0): AWS access key ids and secret access keys, GCP API
keys, PEM private key blocks (kind `gcp_service_account_key` when the block is the
`"private_key"` of a service-account JSON), Azure storage account / shared access keys,
GitHub and GitLab tokens, Slack tokens and webhooks, JWTs. Generic detectors (score
0.8): high-entropy values assigned to credential-named keys (`API_KEY = "..."`) and
`Bearer` tokens. Every regex only proposes candidates; a validator decides (entropy,
placeholders, base64/JSON decoding).

The text of the scored items is treated as one stream, so a secret split across two
items is found once, in the item where it completes (`deltaguard.classifiers.rules`). PEM blocks
and JWTs can be longer than the window, so they are small automata whose progress
(counters, not text) lives in the state.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import string
from itertools import pairwise
from typing import Any

from deltaguard.classifiers.base import Lane
from deltaguard.classifiers.rules import (
    Buffer,
    Check,
    Hit,
    Rule,
    Starts,
    WindowedRuleClassifier,
    anchor,
    find_all,
    literal,
    redact,
    rule,
    shannon_entropy,
    view_table,
)

STRUCTURED = 1.0
GENERIC = 0.8


# --- Structured tokens ------------------------------------------------------------

_LONG_REPEAT = re.compile(r"(.)\1{5,}")  # "XXXXXX" in a token body: a placeholder


def _token(kind: str, body_from: int = 0) -> Check:
    """Check for fixed-shape tokens: reject bodies with long runs of one character."""

    def check(m: re.Match[str]) -> Hit | None:
        value = m.group("m")
        if _LONG_REPEAT.search(value[body_from:]):
            return None
        return Hit(kind, STRUCTURED, redact(value))

    return check


def _check_slack_token(m: re.Match[str]) -> Hit | None:
    value = m.group("m")
    # Real tokens carry numeric team/user ids; "xoxb-your-token-here" does not.
    if sum(c.isdigit() for c in value) < 6 or _LONG_REPEAT.search(value):
        return None
    return Hit("slack_token", STRUCTURED, redact(value))


def _check_azure(m: re.Match[str]) -> Hit | None:
    value = m.group("v")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) < 32 or shannon_entropy(value) < 4.0:
        return None
    kind = "azure_storage_account_key" if m.group("k") == "AccountKey" else "azure_shared_access_key"
    return Hit(kind, STRUCTURED, redact(value))


# --- Generic: credential-named assignments and bearer tokens -------------------------

_KEY_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
# Whole words of the key name (split on _ . - and camelCase), so "tokenizer_path" or
# "author" do not count, and adjacent pairs such as api+key. "Bearer x" is the bearer
# rule's, not an assignment to a key named Bearer.
_CRED_WORDS = frozenset(
    {
        "password", "passwd", "pwd", "pass", "passphrase", "secret", "secrets", "token", "tokens",
        "auth", "authorization", "credential", "credentials", "creds", "apikey",
    }
)  # fmt: skip
_CRED_PAIRS = frozenset(
    {
        "apikey", "accesskey", "privatekey", "secretkey", "signingkey", "sessionkey",
        "encryptionkey", "masterkey",
    }
)  # fmt: skip
# Keys owned by a structured rule (Azure connection strings): no second, generic finding.
_STRUCTURED_KEYS = frozenset({"accountkey", "sharedaccesskey"})
_STRUCTURED_PREFIX = re.compile(r"AKIA|ASIA|AIza|gh[pousr]_|github_pat_|glpat-|xox[abeprs]-|eyJ|-----")
_PLACEHOLDERS = (
    "example", "xxxx", "your", "placeholder", "changeme", "change_me", "dummy", "sample",
    "redacted", "replace", "insert", "fake", "here", "todo", "0000", "1234567", "abcdef",
)  # fmt: skip
_REPEAT4 = re.compile(r"(.)\1{3,}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_AWS_SECRET = re.compile(r"[A-Za-z0-9/+]{40}")


def _is_credential_key(key: str) -> bool:
    parts = [p.lower() for p in _KEY_PARTS.findall(key)]
    if parts and parts[-1] in ("id", "ids"):
        return False  # private_key_id, access_key_id: identifiers, not secrets
    if any(p in _CRED_WORDS for p in parts):
        return True
    return any(a + b in _CRED_PAIRS for a, b in pairwise(parts))


def looks_random(value: str) -> bool:
    """The generic-secret validator: long, mixed, high-entropy and not a placeholder."""
    if len(value) < 20 or _STRUCTURED_PREFIX.match(value):
        return False
    low = value.lower()
    if any(p in low for p in _PLACEHOLDERS) or _REPEAT4.search(value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if len(set(value)) < 10:
        return False
    # Hex has 4 bits per char at most, so it gets a lower bar than base62/base64.
    return shannon_entropy(value) >= (3.0 if _HEX.fullmatch(value) else 3.5)


def _check_assignment(m: re.Match[str]) -> Hit | None:
    key, value = m.group("key"), m.group("val")
    if not _is_credential_key(key):
        return None
    flat = re.sub(r"[^a-z]", "", key.lower())
    if flat in _STRUCTURED_KEYS:
        return None
    # An AWS secret access key has no prefix: 40 base64 chars under an AWS-ish name.
    # Other values under such a name get no generic fallback, so the first 30 chars of
    # a key split across items are not reported as a (weaker) generic secret.
    if "aws" in flat or "secretaccesskey" in flat:
        if _AWS_SECRET.fullmatch(value) and not _LONG_REPEAT.search(value) and shannon_entropy(value) >= 3.5:
            return Hit("aws_secret_access_key", STRUCTURED, redact(value))
        return None
    if looks_random(value):
        return Hit("generic_secret", GENERIC, redact(value))
    return None


def _check_bearer(m: re.Match[str]) -> Hit | None:
    value = m.group("val")
    return Hit("bearer_token", GENERIC, redact(value)) if looks_random(value) else None


# --- Where rules can start ------------------------------------------------------------

# Matches of all rules but the Slack token's hold a run of 20+ chars of this class (an
# AWS key id, a webhook's path, a value, a bearer credential; the other tokens are
# longer). In a view where the class is one byte such runs are found by a literal
# search, and a rule is not looked for when no run is long enough for it.
_VALUE_VIEW = view_table({string.ascii_letters + string.digits + "_+/=.~-": "v"}, " ")
_MIN_RUN = 20
_KEY_CHARS = string.ascii_letters + string.digits + "_.-"
_GLUE = "\"'` \t:=>"  # what may stand between a key and its value: quotes, separators
_GLUE_MAX = 12  # a quote, 4 blanks, "=>" or ":=", 4 blanks, a quote


def _runs(buf: Buffer) -> list[tuple[int, int]]:
    """The maximal runs of _MIN_RUN+ value chars from buf.lo, as (start, end)."""

    def find() -> list[tuple[int, int]]:
        view, lo = buf.view(_VALUE_VIEW), buf.lo
        # Found by their end: a needle ending in a char it has nowhere else is searched
        # fast; one that is all "v" is slow in text that is mostly "v".
        needle = b"v" * _MIN_RUN + b" "
        out = []
        i = view.find(needle, lo)
        while i >= 0:
            end = i + _MIN_RUN
            out.append((max(lo, view.rfind(b" ", lo, i) + 1), end))
            i = view.find(needle, end)
        start = max(lo, view.rfind(b" ", lo) + 1)
        if len(view) - start >= _MIN_RUN:
            out.append((start, len(view)))
        return out

    return buf.memo(_runs, find)


def _longest_run(buf: Buffer) -> int:
    return buf.memo(_longest_run, lambda: max((end - start for start, end in _runs(buf)), default=0))


def _needs_run(length: int, starts: Starts) -> Starts:
    """`starts`, looked for only when a run of `length` value chars exists."""
    return lambda buf: starts(buf) if _longest_run(buf) >= length else ()


def _assignment_starts(buf: Buffer) -> list[int]:
    """Where `key = value` can start: for each place a value can begin, the key before it.

    A value begins a run, or follows an "=" inside one (the only value char that can end
    the glue). Before it, up to _GLUE_MAX glue chars, then the key: the run of key chars
    ending there (keys are at most 64 chars).
    """
    text, lo = buf.text, buf.lo
    found = set()
    for start, end in _runs(buf):
        value = start
        while value >= 0:
            a = max(lo, value - _GLUE_MAX)
            key_end = a + len(text[a:value].rstrip(_GLUE))
            if lo < key_end < value and text[key_end - 1] in _KEY_CHARS:
                b = max(lo, key_end - 64)
                found.add(b + len(text[b:key_end].rstrip(_KEY_CHARS)))
            eq = text.find("=", value, end - _MIN_RUN)
            value = eq + 1 if eq >= 0 else -1
    return sorted(found)


def _bearer_starts(buf: Buffer) -> list[int]:
    lower = buf.memo(_bearer_starts, lambda: buf.text.encode("latin-1", "replace").lower())
    return find_all(lower, b"bearer", buf.lo)


SECRET_RULES: tuple[Rule, ...] = (
    rule(
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        _token("aws_access_key_id", 4),
        trigger="AKIA|ASIA|ABIA|ACCA",
        starts=_needs_run(20, anchor("A(?=KIA|SIA|BIA|CCA)")),
    ),
    rule(
        r"(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])",
        _token("gcp_api_key", 4),
        "AIza",
        _needs_run(39, literal("AIza")),
    ),
    rule(
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59})"
        r"(?![A-Za-z0-9_])",
        _token("github_token", 4),
        trigger="gh[pousr]_|github_pat_",
        starts=_needs_run(40, anchor("g(?=h[pousr]_|ithub_pat_)")),
    ),
    rule(
        r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,80}",
        _token("gitlab_token", 6),
        "glpat-",
        _needs_run(26, literal("glpat-")),
    ),
    rule(
        r"(?<![A-Za-z0-9_-])xox[abeprs]-[A-Za-z0-9-]{10,200}",
        _check_slack_token,
        "xox[abeprs]-",
        anchor("x(?=ox[abeprs]-)"),
    ),
    rule(
        r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{20,32}",
        _token("slack_webhook", 33),
        trigger=r"hooks\.slack\.com",
        starts=_needs_run(20, literal("https://hooks.slack.com/services/T")),
    ),
    rule(
        r"(?<![A-Za-z0-9])(?P<k>AccountKey|SharedAccessKey)[ \t]*=[ \t]*(?P<v>[A-Za-z0-9+/]{40,86}={0,2})",
        _check_azure,
        trigger="AccountKey|SharedAccessKey",
        starts=_needs_run(40, literal("AccountKey", "SharedAccessKey")),
    ),
    rule(
        r"(?<![A-Za-z0-9_.-])(?P<key>[A-Za-z0-9_.-]{1,64})[\"']?"
        r"(?:[ \t]{0,4}(?:=>|:=|[:=])[ \t]{0,4}|[ \t])[\"'`]?"
        r"(?P<val>[A-Za-z0-9_+/=.~-]{20,256})",
        _check_assignment,
        trigger=r"[A-Za-z0-9_+/=.~-]{20}",
        starts=_needs_run(_MIN_RUN, _assignment_starts),
    ),
    rule(
        r"(?<![A-Za-z0-9_-])(?i:bearer)[ \t]+(?P<val>[A-Za-z0-9._~+/-]{20,256}={0,2})",
        _check_bearer,
        "(?i:bearer)",
        _needs_run(_MIN_RUN, _bearer_starts),
    ),
)


# --- Block detectors: PEM private keys and JWTs ---------------------------------------

_PEM_MARK = re.compile(
    r"-----(?P<edge>BEGIN|END) (?P<label>(?:[A-Z0-9]{1,12} ){0,3})PRIVATE KEY(?: BLOCK)?-----", re.ASCII
)
_PEM_MARK_MAX = 80
_GCP_PRIVATE_KEY = re.compile(r'"private_key"[ \t]*:[ \t]*"\Z', re.ASCII)
_B64_RUN = re.compile(r"[A-Za-z0-9+/=]+", re.ASCII)
# A key body holds base64 lines, armor headers (Proc-Type: 4,ENCRYPTED / Version: x.y
# (z)) and, inside JSON, "\n" escapes. Anything else means this is prose, not a key.
_PEM_FOREIGN = re.compile(r"[^A-Za-z0-9+/=\t\n\r \\:,.()-]", re.ASCII)
PEM_MIN_BASE64 = 64  # the smallest real key (Ed25519 PKCS#8) has 64 base64 chars
PEM_MIN_RUN = 40  # bodies are wrapped at 64 chars; prose has no 40-char "word"


def _pem_body(pem: dict[str, Any], seg: str) -> dict[str, Any] | None:
    """Account for a stretch of key body: base64 count and the longest base64 run."""
    foreign = _PEM_FOREIGN.search(seg)
    if foreign:
        return None
    b64, run, longest = pem["b64"], pem["run"], pem["max"]
    last_end = -1
    for m in _B64_RUN.finditer(seg):
        length = m.end() - m.start()
        b64 += length
        run = run + length if m.start() == 0 else length
        longest = max(longest, run)
        last_end = m.end()
    if last_end != len(seg):
        run = 0
    return {**pem, "b64": b64, "run": run, "max": longest}


def _scan_pem(pem: dict[str, Any] | None, buf: str, new: int, lo: int) -> tuple[Any, list[tuple[int, Hit]]]:
    hits: list[tuple[int, Hit]] = []
    pos = new
    for m in _PEM_MARK.finditer(buf, max(lo, new - _PEM_MARK_MAX)):
        if m.end() <= new:  # completed in an earlier item, already acted on
            continue
        if pem is not None and m.start() > pos:
            pem = _pem_body(pem, buf[pos : m.start()])
        if m.group("edge") == "BEGIN":
            before = _GCP_PRIVATE_KEY.search(buf, max(0, m.start() - 40), m.start())
            kind = "gcp_service_account_key" if before else "private_key"
            label = f"{m.group('label')}PRIVATE KEY"
            pem = {"kind": kind, "label": label, "b64": 0, "run": 0, "max": 0}
        elif pem is not None:
            # Part of this marker arrived with the previous item and was counted as body.
            counted = sum(len(r) for r in _B64_RUN.findall(buf, m.start(), new)) if m.start() < new else 0
            if pem["b64"] - counted >= PEM_MIN_BASE64 and pem["max"] >= PEM_MIN_RUN:
                hits.append((m.end(), Hit(pem["kind"], STRUCTURED, pem["label"])))
            pem = None
        pos = m.end()
    if pem is not None and pos < len(buf):
        pem = _pem_body(pem, buf[pos:])
    return pem, hits


# "eyJ" not preceded by a token char; the lookbehind comes after the literal so that the
# engine can search for the literal.
_JWT_HEADER = re.compile(r"eyJ(?<![A-Za-z0-9_.-]eyJ)[A-Za-z0-9_-]{8,400}\.", re.ASCII)
_JWT_HEADER_MAX = 405
_JWT_CHARS = re.compile(r"[A-Za-z0-9_-]*", re.ASCII)
JWT_MIN_SIGNATURE = 16  # "alg": "none" tokens (empty signature) are not credentials


def _jwt_header_ok(segment: str) -> bool:
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error):  # JSON, UTF-8 and base64 errors are ValueErrors
        return False
    return isinstance(header, dict) and isinstance(header.get("alg"), str)


def _jwt_run(
    jwt: dict[str, Any] | None, buf: str, pos: int, limit: int, hits: list[tuple[int, Hit]]
) -> dict[str, Any] | None:
    """Follow an open token over buf[pos:limit]: segment number and length so far."""
    while jwt is not None and pos < limit:
        m = _JWT_CHARS.match(buf, pos, limit)
        seg, n, hit = jwt["seg"], jwt["n"] + m.end() - pos, jwt["hit"]
        if seg == 3 and not hit and n >= JWT_MIN_SIGNATURE:
            at = m.end() - (n - JWT_MIN_SIGNATURE)  # just after the 16th signature char
            hits.append((at, Hit("jwt", STRUCTURED, f"eyJ…{buf[at - 4 : at]}")))
            hit = True
        pos = m.end()
        if pos == limit:
            return {"seg": seg, "n": n, "hit": hit}
        jwt = {"seg": seg + 1, "n": 0, "hit": hit} if buf[pos] == "." else None
        pos += 1
    return jwt


def _scan_jwt(jwt: dict[str, Any] | None, buf: str, new: int, lo: int) -> tuple[Any, list[tuple[int, Hit]]]:
    hits: list[tuple[int, Hit]] = []
    pos = new
    first = buf.find("eyJ", max(lo, new - _JWT_HEADER_MAX))
    headers = _JWT_HEADER.finditer(buf, first) if first >= 0 else ()  # most text has none
    for m in headers:
        if m.end() <= new:
            continue
        # A header needs a non-token char before it, which closed any open token.
        jwt = _jwt_run(jwt, buf, pos, m.start(), hits) if m.start() > pos else jwt
        if _jwt_header_ok(m.group()[:-1]):
            jwt = {"seg": 2, "n": 0, "hit": False}
        pos = m.end()
    jwt = _jwt_run(jwt, buf, pos, len(buf), hits)
    return jwt, hits


class SecretsClassifier(WindowedRuleClassifier):
    """Credentials (cloud keys, tokens, private keys, high-entropy assigned values).

    Scores 1.0 for a validated structured secret, 0.8 for the generic high-entropy
    rules, 0.0 otherwise; the conversation score is the running max. Findings carry a
    redacted preview only.
    """

    name = "secrets"
    version = "1.0.0"
    categories = ("secrets",)
    lane: Lane = "gate"
    rules = SECRET_RULES

    def _blocks_initial(self) -> dict[str, Any]:
        return {"pem": None, "jwt": None}

    def _scan_blocks(
        self, blocks: dict[str, Any], buf: str, new: int, lo: int
    ) -> tuple[dict[str, Any], list[tuple[int, Hit]]]:
        pem, pem_hits = _scan_pem(blocks["pem"], buf, new, lo)
        jwt, jwt_hits = _scan_jwt(blocks["jwt"], buf, new, lo)
        return {"pem": pem, "jwt": jwt}, pem_hits + jwt_hits
