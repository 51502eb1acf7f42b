"""PII classifier: personal identifiers in transcript text, found by validated rules.

Checksum-validated identifiers score 1.0: payment card numbers (IIN prefix and length
per brand, Luhn), IBANs (country length table, mod-97) and Spanish DNI/NIE (check
letter). Rule-validated national ids score 0.9: US SSNs (area/group/serial rules) and UK
National Insurance numbers (prefix and suffix rules); they have no checksum. Emails
score 0.8 and phone numbers 0.7.

Phones are deliberately strict: international numbers need a leading "+" (8-15 digits);
national ones need separators or parentheses and a known shape (NANP 3-3-4, or a trunk
"0" with 10-11 digits), so bare digit runs (ids, timestamps), dates, versions and
dotted IPs are not phones.

The cross-item window (a value split across two items is found once, where it
completes), the state layout and the fold are `WindowedRuleClassifier`'s (`deltaguard.classifiers.rules`).
"""

from __future__ import annotations

import re
import string

from deltaguard.classifiers.base import Lane
from deltaguard.classifiers.rules import Buffer, Hit, Rule, WindowedRuleClassifier, redact, rule, view_table

EMAIL = 0.8
PHONE = 0.7
NATIONAL_ID = 0.9
CHECKSUM = 1.0

_NON_DIGIT = re.compile(r"[^0-9]")
_NON_ALNUM = re.compile(r"[^A-Z0-9]")


# --- Email ---------------------------------------------------------------------------

# Asset names such as "logo@2x.png" have the shape of an address.
_FILE_TLDS = frozenset(
    {"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "css", "js", "json", "txt", "html"}
)


def _check_email(m: re.Match[str]) -> Hit | None:
    value = m.group("m")
    local, _, domain = value.rpartition("@")
    if local.startswith(".") or local.endswith(".") or ".." in local:
        return None
    if domain.rsplit(".", 1)[-1].lower() in _FILE_TLDS:
        return None
    return Hit("email", EMAIL, redact(value))


# The digit groups of a spaced IBAN ("NL91 ABNA 0417 1643 00") look like a national
# phone or card number on their own. Validators may look back CONTEXT_CHARS (64) chars.
_IBAN_BEFORE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: [A-Z0-9]{4}){0,7} \Z")


def _inside_iban(m: re.Match[str]) -> bool:
    start = m.start()
    return _IBAN_BEFORE.search(m.string, max(0, start - 40), start) is not None


# --- Phone ---------------------------------------------------------------------------

_DOUBLE_SEP = re.compile(r"[ .-]{2}|\(\(|\)\)|\)[0-9]*\(")
_PAREN = re.compile(r"\(\+?[0-9]{1,4}\)")
_GROUPS = re.compile(r"[0-9]+")


def _date_like(groups: list[str]) -> bool:
    """dd mm yyyy or yyyy mm dd at the front: a date (and time), not a phone."""
    if len(groups) < 3:
        return False
    a, b, c = groups[:3]
    if len(a) == 4 and a[:2] in ("19", "20"):
        a, c = c, a
    return (
        len(a) <= 2 and len(b) <= 2 and len(c) == 4 and c[:2] in ("19", "20")
        and 1 <= int(a) <= 31 and 1 <= int(b) <= 31
    )  # fmt: skip


def _check_phone(m: re.Match[str]) -> Hit | None:
    value = m.group("m")
    if _DOUBLE_SEP.search(value) or _inside_iban(m):
        return None
    opens = value.count("(")
    if opens != value.count(")") or opens > 1 or (opens and not _PAREN.search(value)):
        return None
    digits = _NON_DIGIT.sub("", value)
    groups = _GROUPS.findall(value)
    seps = set(value) & {" ", ".", "-"}
    if len(set(digits)) == 1 or ("." in seps and len(seps) > 1):
        return None
    if seps == {"."} and len(groups) == 4 and all(len(g) <= 3 for g in groups):
        return None  # a dotted IPv4 address
    if value.startswith(("+", "(+")):
        ok = 8 <= len(digits) <= 15  # E.164
    elif len(groups) < 2:
        ok = False  # a bare national digit run is an id or a timestamp as often as a phone
    elif digits[0] == "0":
        ok = 10 <= len(digits) <= 11 and all(len(g) >= 2 for g in groups) and not _date_like(groups)
    else:
        sizes = [len(g) for g in groups]
        if sizes == [1, 3, 3, 4] and groups[0] == "1":
            groups = groups[1:]
        elif sizes != [3, 3, 4]:
            return None
        ok = groups[0][0] in "23456789" and groups[1][0] in "23456789"  # NANP area, exchange
    return Hit("phone", PHONE, redact(value)) if ok else None


# --- Payment cards -------------------------------------------------------------------

_ANY = range(12, 20)
# (first prefix, last prefix, lengths) per brand's issuer identification ranges.
_CARD_IINS: tuple[tuple[int, int, tuple[int, ...] | range], ...] = (
    (4, 4, (13, 16, 19)),  # Visa
    (51, 55, (16,)),  # Mastercard
    (2221, 2720, (16,)),  # Mastercard 2-series
    (34, 34, (15,)),  # American Express
    (37, 37, (15,)),
    (6011, 6011, range(16, 20)),  # Discover
    (644, 649, range(16, 20)),
    (65, 65, range(16, 20)),
    (62, 62, range(16, 20)),  # UnionPay
    (3528, 3589, range(16, 20)),  # JCB
    (300, 305, range(14, 20)),  # Diners Club
    (36, 36, range(14, 20)),
    (38, 39, range(16, 20)),
    (2200, 2204, range(16, 20)),  # Mir
    (5018, 5018, _ANY),  # Maestro
    (5020, 5020, _ANY),
    (5038, 5038, _ANY),
    (5893, 5893, _ANY),
    (6304, 6304, _ANY),
    (6759, 6759, _ANY),
    (6761, 6763, _ANY),
)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _known_iin(digits: str) -> bool:
    for first, last, lengths in _CARD_IINS:
        width = len(str(first))
        if first <= int(digits[:width]) <= last and len(digits) in lengths:
            return True
    return False


def _check_card(m: re.Match[str]) -> Hit | None:
    value = m.group("m")
    if (" " in value and "-" in value) or _inside_iban(m):
        return None  # mixed separators are not how card numbers are written
    digits = _NON_DIGIT.sub("", value)
    if len(set(digits)) == 1 or not _known_iin(digits) or not luhn_ok(digits):
        return None
    return Hit("payment_card", CHECKSUM, redact(value))


# --- IBAN ----------------------------------------------------------------------------

IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TN": 24, "TR": 26, "UA": 29, "VA": 22,
    "VG": 24, "XK": 20,
}  # fmt: skip


def iban_ok(iban: str) -> bool:
    """Length for the country and the ISO 13616 mod-97 check."""
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban[2:4].isdigit():
        return False
    return int("".join(str(int(c, 36)) for c in iban[4:] + iban[:4])) % 97 == 1


def _check_iban(m: re.Match[str]) -> Hit | None:
    value = m.group("m")
    length = IBAN_LENGTHS.get(value[:2])
    if length is None:
        return None
    # The pattern may have taken a following 4-letter word as one more group
    # ("BE68 5390 0754 7034 THEN"): cut at the country's length, on a group boundary.
    alnum = 0
    for i, ch in enumerate(value):
        if ch != " ":
            alnum += 1
            if alnum == length:
                if i + 1 < len(value) and value[i + 1] != " ":
                    return None
                value = value[: i + 1]
                break
    else:
        return None
    return Hit("iban", CHECKSUM, redact(value)) if iban_ok(_NON_ALNUM.sub("", value)) else None


# --- National ids --------------------------------------------------------------------


def _check_ssn(m: re.Match[str]) -> Hit | None:
    area, group, serial = m.group("a"), m.group("g"), m.group("s")
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return None
    return Hit("us_ssn", NATIONAL_ID, redact(m.group("m")))


_NINO_BAD_PREFIXES = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})


def _check_nino(m: re.Match[str]) -> Hit | None:
    if m.group("p") in _NINO_BAD_PREFIXES:
        return None
    return Hit("uk_nino", NATIONAL_ID, redact(m.group("m")))


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _check_dni(m: re.Match[str]) -> Hit | None:
    number = m.group("num")
    kind = "es_nie" if number[0] in "XYZ" else "es_dni"
    n = int(str("XYZ".find(number[0])) + number[1:]) if kind == "es_nie" else int(number)
    if _DNI_LETTERS[n % 23] != m.group("letter") or len(set(number)) == 1:
        return None
    return Hit(kind, CHECKSUM, redact(m.group("m")))


# --- Where rules can start ----------------------------------------------------------

# Emails: each "@" and the run of local-part chars before it.
_LOCAL_CHARS = frozenset(string.ascii_letters + string.digits + "._%+-")


def _email_starts(buf: Buffer) -> list[int]:
    text, lo = buf.text, buf.lo
    out = []
    at = text.find("@", lo)
    while at >= 0:
        start = at
        while start > lo and at - start < 64 and text[start - 1] in _LOCAL_CHARS:
            start -= 1
        if start < at:
            out.append(start)
        at = text.find("@", at + 1)
    return out


# The other rules are read on a view in which every digit is "0" and every capital "A",
# so that the engine can search for a literal. Phones, cards, SSNs, NINOs and DNIs hold
# a number: a digit after a non-digit, then five more of [0-9 ().-] (a NINO without
# spaces has just six digits); they start at it or a few chars before it.
_VIEW = view_table({string.digits: "0", string.ascii_uppercase: "A", " ().+-": ""}, "?")
_NUMBER = re.compile(rb"0(?<!00)(?=[0 ().-]{5})")
_PHONE_AT = re.compile(rb"0[0 ().-]{5,20}0")
_CARD_AT = re.compile(rb"0(?:[ -]?0){12}")
_SSN_AT = re.compile(rb"000[- ]00[- ]0000")
_NINO_AT = re.compile(rb"00 ?00 ?00 ?A")
_DNI_AT = re.compile(rb"0{7}")
_IBAN_AT = re.compile(rb"AA00(?= ?[A0]{4} ?[A0]{4})")  # no IBAN starts inside "AA00"


def _numbers(buf: Buffer) -> tuple[bytes, list[int]]:
    def find() -> tuple[bytes, list[int]]:
        view = buf.view(_VIEW)
        return view, [m.start() for m in _NUMBER.finditer(view, buf.lo)]

    return buf.memo(_numbers, find)


def _phone_starts(buf: Buffer) -> list[int]:
    """At the number, or at a "+", "(" or "(+" just before it."""
    view, numbers = _numbers(buf)
    out = []
    for at in numbers:
        if _PHONE_AT.match(view, at):
            if at >= 2 and view[at - 2 : at] == b"(+":
                out.append(at - 2)
            if at >= 1 and view[at - 1] in b"+(":
                out.append(at - 1)
            out.append(at)
    return [at for at in out if at >= buf.lo]


def _card_starts(buf: Buffer) -> list[int]:
    view, numbers = _numbers(buf)
    return [at for at in numbers if _CARD_AT.match(view, at)]


def _ssn_starts(buf: Buffer) -> list[int]:
    view, numbers = _numbers(buf)
    return [at for at in numbers if _SSN_AT.match(view, at)]


def _nino_starts(buf: Buffer) -> list[int]:
    """Two capitals, then (with or without a space) the number."""
    view, numbers = _numbers(buf)
    out = []
    for at in numbers:
        if _NINO_AT.match(view, at):
            if at >= 3 and view[at - 3 : at] == b"AA ":
                out.append(at - 3)
            if at >= 2 and view[at - 2 : at] == b"AA":
                out.append(at - 2)
    return [at for at in out if at >= buf.lo]


def _dni_starts(buf: Buffer) -> list[int]:
    """At the number, or at the X, Y or Z of a NIE just before it."""
    view, numbers = _numbers(buf)
    out = []
    for at in numbers:
        if _DNI_AT.match(view, at):
            if at >= 1 and view[at - 1] == ord("A"):
                out.append(at - 1)
            out.append(at)
    return [at for at in out if at >= buf.lo]


def _iban_starts(buf: Buffer) -> list[int]:
    return [m.start() for m in _IBAN_AT.finditer(buf.view(_VIEW), buf.lo)]


PII_RULES: tuple[Rule, ...] = (
    rule(
        r"(?<![A-Za-z0-9._%+@-])[A-Za-z0-9._%+-]{1,64}@"
        r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}[A-Za-z0-9])?\.){1,6}[A-Za-z]{2,24}"
        r"(?![A-Za-z0-9-]|\.[A-Za-z0-9])",
        _check_email,
        trigger="@",
        starts=_email_starts,
    ),
    # A run of phone characters ending in a digit; _check_phone decides on its shape.
    rule(
        r"(?<![A-Za-z0-9_+@/.-])(?<![0-9] )(?:\+|\(\+?)?[0-9][0-9 ().-]{5,20}[0-9](?![0-9])",
        _check_phone,
        trigger=r"[0-9][0-9 ().-]{5,20}[0-9]",
        starts=_phone_starts,
    ),
    rule(
        r"(?<![0-9])(?<![0-9][ -])[0-9](?:[ -]?[0-9]){12,18}(?![ -]?[0-9])",
        _check_card,
        r"[0-9](?:[ -]?[0-9]){12}",
        _card_starts,
    ),
    rule(
        r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])",
        _check_iban,
        trigger="[A-Z]{2}[0-9]{2}",
        starts=_iban_starts,
    ),
    rule(
        r"(?<![A-Za-z0-9-])(?<![0-9] )(?P<a>[0-9]{3})(?P<sep>[- ])(?P<g>[0-9]{2})(?P=sep)(?P<s>[0-9]{4})"
        r"(?![A-Za-z0-9]|[- ][0-9])",
        _check_ssn,
        trigger=r"[0-9]{3}[- ][0-9]{2}[- ][0-9]{4}",
        starts=_ssn_starts,
    ),
    rule(
        r"(?<![A-Za-z0-9])(?P<p>[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z])(?P<sep> ?)"
        r"[0-9]{2}(?P=sep)[0-9]{2}(?P=sep)[0-9]{2}(?P=sep)[A-D](?![A-Za-z0-9])",
        _check_nino,
        trigger="[A-Z]{2} ?[0-9]{2} ?[0-9]{2} ?[0-9]{2}",
        starts=_nino_starts,
    ),
    rule(
        r"(?<![A-Za-z0-9])(?P<num>[XYZ][0-9]{7}|[0-9]{8})-?(?P<letter>[A-Z])(?![A-Za-z0-9])",
        _check_dni,
        "[0-9]{7}",
        _dni_starts,
    ),
)


class PiiClassifier(WindowedRuleClassifier):
    """Personal data: emails, phones, payment cards, IBANs and national ids.

    Scores 1.0 for checksum-validated identifiers, 0.9 for rule-validated national ids,
    0.8 for emails, 0.7 for phones, 0.0 otherwise; the conversation score is the running
    max. Findings carry a redacted preview only.
    """

    name = "pii"
    version = "1.0.0"
    categories = ("pii",)
    lane: Lane = "gate"
    rules = PII_RULES
