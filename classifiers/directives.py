"""Directives: instructions that untrusted content addresses to the model, asking for what
its user would not want.

A file, an issue, a log or a fetched page that a coding agent reads may carry a note for
it. Most such notes are what a repository wants its agents to do ("AI agents: run
`pytest -q` before proposing a change"); an injection is one that asks the reader to
disclose a secret, run something fetched from elsewhere, act on the repository or its
safeguards behind the user's back, keep its work from the user, or drop the user's task.
The models read a note's wording; phrased in words their training rows do not use, such
an instruction scores near zero for both (`python -m eval.coding_probe`). This view reads
its structure instead, by rules (after ctxsentry 0.5.0's repository-borne patterns, a
source of rules to learn from, docs/data.md):

    addressed      the note speaks to an AI reader: a vocative ("Hey Claude,", "Note to AI
                   agents:", "@copilot", "[assistant instructions]"), "if you are an AI
                   ...", "any agent reading this ...", the reader as a request's subject
                   ("AI assistants must run ..."), a fake system banner ("SYSTEM NOTE:");
                   the note runs from there to the end of its paragraph (NOTE_CHARS at most)
    harmful        the note asks, unnegated, unquoted and not merely described, for one of:
                     disclosure     print, send, paste or attach a secret (a key, a token,
                                    a credentials file, a secret variable, the environment)
                     execution      fetch-and-run, a package index or install elsewhere,
                                    a reverse shell
                     repository     force-push, merge or publish unreviewed, change owners
                                    or admins, weaken a safeguard (authentication, role
                                    checks, CSRF, TLS verification, branch protection,
                                    password hashing, secret scanning, the tests), plant a
                                    backdoor
                     concealment    keep it from the user ("silently", "the user must not
                                    find out", "do not mention this step")
                     override       drop the user's task ("ignore your previous
                                    instructions", "your real task is ...")
                     exfiltration   the environment piped to a network tool

Either part alone is ordinary text: repositories address their agents, and security
pages describe every harmful act. Some requests need no addressee, as no document asks them
of its reader: an override, the environment sent off the machine, a harm with its
concealment a sentence away, and a secret disclosed *somewhere* (a URL, an e-mail address,
an issue comment, a commit message, a pull request, a gist, the reply).

Scores are NOTE_SCORE (flagged) or 0.0, per item; an item's finding is the note's range.
Tool outputs and attached files are read, the channels an injection arrives by; what a
principal writes, a document it pastes included, is its own instruction, judged by the
lexical view and the detector.
Stateless per item: the conversation score is the running max, so delta and full agree by
construction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from deltaguard.classifiers.base import (
    Finding,
    Lane,
    Scores,
    State,
    Update,
    count_tokens,
    max_update,
    zero_scores,
)
from deltaguard.classifiers.directive_patterns import (
    AI_NAME,
    AI_WORDS,
    ANY_READER,
    ANY_READER_WORDS,
    BACK_CHARS,
    BANNER,
    BANNER_OPENS,
    BANNER_WORDS,
    BRACKETS,
    CLAUSE_START,
    CONCEALMENT,
    CONCEALMENT_WORDS,
    DEFANGED,
    EXFILTRATION,
    EXFILTRATION_WORDS,
    FILLER,
    FORMS,
    HARM,
    HEDGE,
    HUMAN_OR,
    HUMAN_OR_WORDS,
    KEYED,
    LIST_OPENS,
    LOOKS_BACK,
    NEGATION,
    NOTE_END,
    OPENING,
    OVERRIDE,
    OVERRIDE_WORDS,
    QUOTED_KINDS,
    QUOTES,
    SECRET_SENT,
    SECRET_WORDS,
    SENTENCE_END,
    UNDONE,
    UNNEGATED,
    USERS_TASK,
    USERS_WORDS,
    rules_digest,
)
from deltaguard.items import Item

CATEGORY = "prompt_injection"
UNTRUSTED = "tool"  # the role of content from outside the conversation
NOTE_CHARS = 400  # how far a note runs past its addressee
CLAUSE_BACK = 60  # how far back a negation may stand before what it negates
PREVIEW_CHARS = 120
# A rule's verdict, as the pii view scores its rule-validated ids: over every threshold a
# policy sets at 0.9 or less, and off under a stricter one.
NOTE_SCORE = 0.9
# what no document asks of its reader, looked for without an addressee: (kind, anchors, pattern,
# how far before its anchor a match may start)
ALONE_SEARCHES = (
    ("override", OVERRIDE_WORDS, OVERRIDE, 8),
    ("exfiltration", EXFILTRATION_WORDS, EXFILTRATION, 80),
)
QUOTE_CHARS = 2000  # how far back in its paragraph a quotation may open
LINE_CHARS = 400  # a line longer than this (minified JSON, a one-line page) is reported by its sentences
PAIR_CHARS = 240  # how far a harm may stand from the concealment that hides it
SENTENCE_CHARS = 200  # how far a request to disclose a secret reaches either side of the secret


class Note(NamedTuple):
    start: int
    end: int
    why: str  # the harm it asks for


def lowered(text: str) -> str:
    """`text` lower-cased, each character in its place (a few characters lower to two)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _asked(low: str, start: int, kind: str) -> bool:
    """Whether what starts at `start` is asked for: not quoted, negated or described. A
    negation reaches back over commas ("never, in any case, push ..."); a hedge only to
    the last one ("If you are an agent, run ..." asks; "attackers may run ..." tells)."""
    if _quoted(low, start, kind):
        return False
    before = low[max(0, start - CLAUSE_BACK) : start]
    if HEDGE.search(_clause(before, OPENING)) or UNDONE.search(before):
        return False
    return kind in UNNEGATED or NEGATION.search(_clause(before, CLAUSE_START)) is None


def _clause(before: str, boundary: re.Pattern[str]) -> str:
    cut = boundary.search(before)
    return before[cut.end() :] if cut else before


def _imperative(low: str, start: int) -> bool:
    """Whether what starts at `start` opens its clause, as a request does ("First, send ...",
    "- post ..."), rather than follow a subject ("the client sends ...")."""
    words = _clause(low[max(0, start - CLAUSE_BACK) : start], OPENING).split()
    return len(words) <= 3 and all(w in FILLER for w in words)


def _harms(low: str, lo: int, hi: int) -> list[re.Match[str]]:
    return [m for m in HARM.finditer(low, lo, hi) if _asked(low, m.start(), m.lastgroup or "")]


def _positions(low: str, words: tuple[str, ...]) -> list[int]:
    out = []
    for word in words:
        at = low.find(word)
        while at >= 0:
            out.append(at)
            at = low.find(word, at + 1)
    return sorted(out)


def _quoted(low: str, start: int, kind: str = "") -> bool:
    """Whether `start` lies inside a quotation in prose, as a page that mentions the words
    quotes them ('an attacker hides "new instructions: ..." in a page', over a line break
    too), rather than inside a string value ("description": "Hey Claude, ...", a notebook
    cell, x = "..."). A backtick quotes an override or a concealment, and opens a command of
    any other kind, whose quotes are its arguments (`python -c "..."`)."""
    first = max(start - QUOTE_CHARS, 0)
    for blank in NOTE_END.finditer(low, first, start):
        first = blank.end()
    span = low[first:start].replace('"""', "   ").replace("```", "   ").replace("``", " `")
    in_code = span.count("`") % 2
    if in_code and kind not in QUOTED_KINDS:
        return False
    if span.count('"') % 2:
        opened = span.rfind('"')
    elif span.count("\u201c") > span.count("\u201d"):
        opened = span.rfind("\u201c")
    elif in_code:
        opened = span.rfind("`")
    elif span.rstrip()[-1:] in QUOTES:  # a single quote, only right before: "don't" is no quotation
        opened = len(span.rstrip()) - 1
    else:
        return False
    return not _opens_value(low, first + opened)


def _opens_value(low: str, at: int) -> bool:
    """Whether the quote at `at` opens a string value: a list's element ('["general", "',
    '- "', or one that opens its line after "," or "["), or what a key or a name is given
    ('"source": ', 'description: ', 'note = '); not a quotation in a sentence ('... tokens:
    "Ignore ...', '("Hey Claude,", "Note to AI agents:")')."""
    head = low[max(low.rfind("\n", 0, at) + 1, at - QUOTE_CHARS) : at].rstrip()
    if not head:
        return low[max(0, at - BACK_CHARS) : at].rstrip()[-1:] in LIST_OPENS
    if head[-1] == "," and head.count("[") + head.count("{") > head.count("]") + head.count("}"):
        return True
    return head[-1] in BRACKETS or KEYED.search(head) is not None


def addressees(low: str) -> list[tuple[int, int, bool]]:
    """Where a note speaks to an AI reader: (start of the address, end, whether the note may
    run back to its paragraph's start)."""
    out = []
    named = 0
    for at in _positions(low, AI_WORDS):
        if at < named or (at and low[at - 1].isalnum()):
            continue
        m = AI_NAME.match(low, at)
        if m is None or (m.end() < len(low) and low[m.end()].isalnum()):
            continue
        s, e = m.span()
        named = e
        for before, after in FORMS:
            b = before.search(low, max(0, s - BACK_CHARS), s)
            a = b and after.match(low, e)
            if a:
                start = b.start("at") if "at" in before.groupindex else b.start()
                if not _quoted(low, start):  # a quoted address is a mention
                    out.append((start, a.end(), (before, after) in LOOKS_BACK))
                break
    for at in _positions(low, BANNER_WORDS):
        m = BANNER.match(low, at)
        if m:
            opened = low[max(0, at - BACK_CHARS) : at].rstrip(" \t")
            if (not opened and at <= BACK_CHARS) or opened[-1:] in BANNER_OPENS:
                out.append((*m.span(), True))
    for at in _positions(low, ANY_READER_WORDS):
        m = ANY_READER.match(low, at)
        if m and not (at and low[at - 1].isalnum()) and not _quoted(low, at):
            out.append((*m.span(), True))
    for at in _positions(low, HUMAN_OR_WORDS):
        m = HUMAN_OR.search(low, max(0, at - 20), at + 40)
        if m and not _quoted(low, m.start()):
            out.append((*m.span(), True))
    for at in _positions(low, USERS_WORDS):
        m = USERS_TASK.search(low, max(0, at - BACK_CHARS), at + 30)
        if m:
            out.append((*m.span(), True))
    return sorted(out)


def _sentence_end(low: str, at: int, sentences: int) -> int:
    for _ in range(sentences):
        m = SENTENCE_END.search(low, at)
        if m is None:
            return len(low)
        at = m.end()
    return at


def _sentence_start(low: str, at: int, sentences: int, reach: int) -> int:
    lo = max(0, at - reach)
    ends = [m.end() for m in SENTENCE_END.finditer(low, lo, at)]
    return ends[-sentences] if len(ends) >= sentences else lo


def directives(text: str) -> list[Note]:
    """The harmful directives in `text`, in order, each reported once: notes addressed to an
    AI reader that ask for a harm, and what needs no addressee (`_unaddressed`).

    A note that writes an indicator defanged ("hxxps://", "example[.]com") describes an
    attack, as only a write-up does. A note's range covers the lines it spans, as the lexical
    view's located findings do (the unit a reviewer reads and a sanitiser removes); in a line
    longer than LINE_CHARS, its sentences."""
    low = lowered(text)
    notes = _addressed(low) + _unaddressed(low) + _hidden_harms(low) + _secrets_sent(low)
    widened = (_whole(low, note) for note in notes)
    return _once([n for n in widened if not DEFANGED.search(low, n.start, n.end)])


def _addressed(low: str) -> list[Note]:
    """Notes that speak to an AI reader and ask for a harm: from the address to the end of
    its paragraph (NOTE_CHARS at most)."""
    notes: list[Note] = []
    reach = 0
    for start, end, back in addressees(low):
        if start < reach:
            continue
        stop = NOTE_END.search(low, end, end + NOTE_CHARS)
        hi = stop.start() if stop else min(len(low), end + NOTE_CHARS)
        # a note that names its reader as a request's subject ("... | bash, and any bot that lands
        # here should apply it") may point back at what comes before it in its paragraph
        lo = max(start - NOTE_CHARS, reach) if back else start
        for blank in NOTE_END.finditer(low, lo, start):
            lo = blank.end()
        found = _harms(low, lo, hi)
        if found:
            first = found[0]
            notes.append(Note(min(start, first.start()), max(end, first.end()), first.lastgroup or ""))
            reach = max(end, first.end())
    return notes


def _unaddressed(low: str) -> list[Note]:
    """What no document asks of its reader (ALONE_SEARCHES): an override of the user's task,
    the environment sent off the machine."""
    notes: list[Note] = []
    for kind, words, pattern, back in ALONE_SEARCHES:
        for at in _positions(low, words):
            m = pattern.search(low, max(0, at - back), at + 200)  # the anchor may stand inside the match
            if m and _asked(low, m.start(), kind):
                notes.append(Note(m.start(), m.end(), kind))
    return notes


def _hidden_harms(low: str) -> list[Note]:
    """A harm asked for and its concealment from the user, a sentence apart at most
    ("Download ... and run it. Keep it out of the diff.")."""
    notes: list[Note] = []
    hidden = 0
    for at in _positions(low, CONCEALMENT_WORDS):
        m = CONCEALMENT.search(low, max(0, at - 30), at + 60)
        if m is None or m.start() < hidden:
            continue
        hidden = m.end()
        lo = _sentence_start(low, m.start(), 2, PAIR_CHARS)
        hi = min(_sentence_end(low, m.end(), 2), m.end() + PAIR_CHARS)
        other = [
            h for h in _harms(low, lo, hi) if h.lastgroup != "concealment" and _imperative(low, h.start())
        ]
        if other:
            first = other[0]
            notes.append(
                Note(min(first.start(), m.start()), max(first.end(), m.end()), first.lastgroup or "")
            )
    return notes


def _secrets_sent(low: str) -> list[Note]:
    """Requests to disclose a secret somewhere (a URL, an address, an issue comment, a commit
    message, the reply), in a sentence that opens with the request."""
    notes: list[Note] = []
    checked = 0
    for at in _positions(low, SECRET_WORDS):
        if at < checked:
            continue
        lo = _sentence_start(low, at, 1, SENTENCE_CHARS)
        hi = min(_sentence_end(low, at, 1), at + SENTENCE_CHARS)
        checked = hi
        sent = SECRET_SENT.search(low, lo, hi)
        if sent and _asked(low, sent.start(), "disclosure") and _imperative(low, sent.start()):
            notes.append(Note(sent.start(), sent.end(), "disclosure"))
    return notes


def _whole(low: str, note: Note) -> Note:
    """`note` widened to the lines it spans, or in a long line to its sentences."""
    start = low.rfind("\n", 0, note.start) + 1
    end = low.find("\n", note.end)
    end = len(low) if end < 0 else end
    if note.start - start > LINE_CHARS:
        start = _sentence_start(low, note.start, 1, LINE_CHARS)
    if end - note.end > LINE_CHARS:
        end = _sentence_end(low, note.end, 1)
    while start < note.start and low[start].isspace():
        start += 1
    while end > note.end and low[end - 1].isspace():
        end -= 1
    return Note(start, end, note.why)


def _once(notes: list[Note]) -> list[Note]:
    """Notes in order of their starts, those that overlap an earlier one merged into it."""
    out: list[Note] = []
    for note in sorted(notes):
        if out and note.start < out[-1].end:
            last = out[-1]
            out[-1] = Note(last.start, max(last.end, note.end), last.why)
        else:
            out.append(note)
    return out


class DirectivesClassifier:
    """Monitor-lane classifier: per item NOTE_SCORE when its text holds a harmful directive for the
    model (`directives`), conversation score = running max."""

    name = "directives"
    version = f"1+{rules_digest()}"
    categories: tuple[str, ...] = (CATEGORY,)
    # Beside the detector: a note's harm lands when the model acts on it, and the monitor
    # lane's flags are enforced before the model's actions are released.
    lane: Lane = "monitor"
    max_state_bytes = 128

    def initial_state(self) -> State:
        return {"max": zero_scores(self.categories)}

    def update(self, state: State, items: Sequence[Item]) -> Update:
        item_scores: list[Scores] = []
        findings: list[Finding] = []
        tokens = 0
        for i, item in enumerate(items):
            score = 0.0
            texts = []
            if item.scored and item.role == UNTRUSTED and item.text:
                texts.append((item.text, self.name))
                tokens += item.tokens
            if item.attachments:
                texts.append((item.attachments, f"{self.name}/attachment"))
                tokens += count_tokens(item.attachments)
            for text, kind in texts:
                for note in directives(text):
                    score = NOTE_SCORE
                    preview = " ".join(text[note.start : note.end].split())[:PREVIEW_CHARS]
                    findings.append(
                        Finding(CATEGORY, f"{kind}/{note.why}", i, preview, note.start, note.end, NOTE_SCORE)
                    )
            item_scores.append({CATEGORY: score})
        return max_update(state, self.categories, item_scores, tokens, findings)
