"""What the simulated models say: a coding agent's canned answers, file reads and summaries.

Demos, screenshots and benchmarks show the simulated model's text, so it reads like an
agent at work rather than random words: it names the files it read, says what it found
and changed, and closes. Every answer is drawn with a caller's seeded `random.Random`
(a function of the history) and has exactly the number of words asked for, which is what
the simulated usage counts. Nothing here looks like an attack, a secret or personal data:
the classifiers score this text as the model's output.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

# Files a coding agent asks to read, in the order a fix usually takes it through them.
PATHS = (
    "src/retry.py",
    "tests/test_retry.py",
    "src/cache.py",
    "src/session.py",
    "src/config.py",
    "tests/test_cache.py",
    "docs/usage.md",
    "pyproject.toml",
)

_FIX = (
    "The failing test times out because the retry loop never backs off between attempts.",
    "I added an exponential backoff capped at five seconds.",
    "The cache entry is now refreshed before it expires rather than after.",
    "Two call sites passed the timeout in milliseconds where seconds were expected.",
    "The session helper now reads its timeout from the settings file.",
    "I kept the public function signatures unchanged.",
    "The change touches only the retry helper and its tests.",
    "I added a regression test that reproduces the timeout.",
    "The whole test suite passes locally with the change.",
    "Each retry now logs its attempt number and the delay before the next one.",
    "The default stays at three attempts, configurable per client.",
    "Nothing else in the module depended on the old behaviour.",
)
_DOCS = (
    "The project installs with pip into a virtual environment.",
    "The command line has one entry point with a subcommand per task.",
    "Configuration comes from a file, the environment or flags, in that order.",
    "The tests run with pytest and need no network access.",
    "The usage guide walks through a first run in about five minutes.",
    "Each section of the guide ends with a short example you can paste.",
    "Optional extras add the plotting and the message queue support.",
    "The changelog lists one breaking change in the last release.",
)
_HELLO = (
    "I can read files in this repository, run the tests and propose a fix.",
    "I can also explain how a module works or summarise its documentation.",
    "Tell me which test fails or what you would like to change.",
    "I will explain each change before I make it.",
    "Small changes come as one commit with a test beside them.",
    "For larger ones I will suggest a plan first and wait for your go-ahead.",
    "I do not push anything without asking you.",
)
# Closing sentences, one of each length from 1 to 12 words, so that an answer can end on
# exactly the number of words asked for.
_CLOSERS = {
    len(s.split()): s
    for s in (
        "Done.",
        "Tests pass.",
        "Ready for review.",
        "Happy to adjust further.",
        "The diff is ready now.",
        "Shall I open a pull request?",
        "I can also update the changelog entry.",
        "Let me know if you want another approach.",
        "I will push the branch and open a review.",
        "The next step would be to run the integration tests.",
        "If you agree, I will also update the usage guide next.",
        "If you agree, I will push the branch and open a review.",
    )
}


def tool_arguments(rng: random.Random, already: Sequence[str] = ()) -> str:
    """The JSON arguments of the agent's next file read: a file not read yet since the
    user's message, the one after the last read in `PATHS`'s order (the first at random)."""
    start = PATHS.index(already[-1]) + 1 if already and already[-1] in PATHS else rng.randrange(len(PATHS))
    order = [PATHS[(start + k) % len(PATHS)] for k in range(len(PATHS))]
    return json.dumps({"path": next((p for p in order if p not in already), order[0])})


def read_paths(arguments: Sequence[str]) -> list[str]:
    """The paths named by tool calls' JSON arguments (others are skipped)."""
    paths = []
    for raw in arguments:
        try:
            value = json.loads(raw).get("path")
        except (ValueError, AttributeError):
            continue
        if isinstance(value, str) and value not in paths:
            paths.append(value)
    return paths


def _listed(paths: Sequence[str]) -> str:
    return paths[0] if len(paths) == 1 else ", ".join(paths[:-1]) + " and " + paths[-1]


def reply(rng: random.Random, words: int, asked: str = "", read: Sequence[str] = ()) -> str:
    """An answer of exactly `words` words to the user's request `asked`, after reading `read`."""
    lowered = asked.lower()
    if any(w in lowered for w in ("readme", "install", "summar", "docs", "document")):
        pool, opener = _DOCS, "Here is a summary."
    elif any(w in lowered for w in ("hello", "hi,", "what can you do")) and not read:
        pool, opener = _HELLO, "Hello."
    else:
        pool, opener = _FIX, "I found the cause."
    if read:
        opener = f"I read {_listed(list(read)[:4])}."
    out: list[str] = []
    if len(opener.split()) < words - 1:
        out += opener.split()
    # The pool in its written order (cause, fix, checks), some sentences left out at random;
    # a long answer goes round again.
    at, used = 0, set()
    while words - len(out) > max(_CLOSERS):
        n = at % len(pool)
        at += 1
        sentence = pool[n].split()
        if n in used and len(used) < len(pool):
            continue  # say everything once before saying anything twice
        if rng.random() < 0.7 and len(sentence) < words - len(out):
            out += sentence
            used.add(n)
    out += _CLOSERS[words - len(out)].split() if words > len(out) else []
    return " ".join(out)
