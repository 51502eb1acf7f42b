"""Files the operator vouches for: their tool outputs judged as the operator's own instructions.

A coding agent reads the files written to instruct it (skills, AGENTS.md, rules, agent and
prompt definitions) through its tools, and their whole purpose is to give the model
instructions: as untrusted content they read as injections, and the gate blocks the agent
for reading its own skills. An operator who installed those files can name them by path
(`--vouch '.claude/skills/**'`, repeatable). A tool output is vouched for when the call
that produced it (same `call_id`) names a matching path, as a path argument of a function
call or a word of a shell command (`cat .claude/skills/review/SKILL.md`), and names no other
file, folder or address (whose text would share the output). Its output is then judged
as a developer message is: for jailbreaks by the operator view, not for injection by the
views of untrusted content (classifiers/base.py PRINCIPAL_ONLY says what each channel can
be guilty of).

Nothing is vouched for by default. Files of a repository the agent was asked to work on
are not the operator's: an `AGENTS.md` or a README note addressed to AI assistants is how
injections reach coding agents, so only paths the operator controls belong here.

`Vouched` wraps one classifier and keeps the vouched calls in its state (a 64-bit hash of
each id, whatever a client makes its ids: the most recent MAX_CALLS, oldest first), so a
call in one turn's output and its result in the next turn's input are matched the same way
in delta mode and in full mode.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from deltaguard.classifiers.base import Classifier, State, Update, Wrapper
from deltaguard.items import Item

OPERATOR_ROLE = "developer"  # how a vouched output is judged
MAX_CALLS = 64  # vouched call ids kept in the state, most recent last
_WORD = re.compile(r"[^\s'\"`;|&<>()]+")  # a shell word, quotes and operators dropped
_RECENT = 256  # call items whose answer `VouchedPaths.names` keeps
_EXTENSION = re.compile(r"[^.]\.[A-Za-z][A-Za-z0-9]{0,9}$")  # "README.md", not "1.5" or "..."
_WORKING_DIRECTORY = frozenset({"workdir", "cwd", "working_directory", "working_dir"})


def glob_pattern(glob: str) -> re.Pattern[str]:
    """A path glob as a regular expression: `**` spans folders, `*` and `?` stay inside
    one, and `folder/**` covers the folder itself. Any folders may come before it, so that
    ".claude/skills/**" matches the absolute path a tool was given too, and "SKILL.md" that
    name in any folder."""
    if not glob.strip("/") or glob.strip() != glob:
        raise ValueError(f"a vouched path must be a non-empty glob without surrounding spaces: {glob!r}")
    body = glob.lstrip("/")
    # "skills/**" covers the folder itself too: a search of the folder reads only its files.
    whole_folder = body.endswith("/**")
    body = body[:-3] if whole_folder else body
    out = []
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] in "*?":
            out.append("[^/]*" if body[i] == "*" else "[^/]")
            i += 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    return re.compile("(?:.*/)?" + "".join(out) + ("(?:/.*)?" if whole_folder else ""))


def add_vouch_option(parser: argparse.ArgumentParser, **default: Any) -> None:
    """`--vouch GLOB`, repeatable, a malformed glob refused as the command line is read: serve's
    flag, and the same on the commands that judge what it served (replay, eval, calibrate,
    review, worker); `default=[]` where the parser has no default of its own."""
    parser.add_argument(
        "--vouch",
        action="append",
        type=_glob_argument,
        metavar="GLOB",
        help="a path whose tool outputs the operator vouches for, judged as its own instructions "
        "rather than as untrusted content (repeatable; none by default; give each command the "
        "gateway's; classifiers/vouched.py)",
        **default,
    )


def _glob_argument(glob: str) -> str:
    try:
        glob_pattern(glob)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return glob


class VouchedPaths:
    """The operator's globs; `names(item)` tells whether a call item names a matching path.

    One instance serves every wrapped classifier, and remembers its recent answers by item
    digest: the classifiers of a fold ask about the same items in turn. Asked once per
    classifier, fifteen globs cost the gate lane 11% more per turn; remembered, 3%."""

    def __init__(self, globs: Iterable[str]) -> None:
        self.globs = tuple(globs)
        self._pattern = re.compile("|".join(f"(?:{glob_pattern(g).pattern})" for g in self.globs))
        self._recent: dict[bytes, bool] = {}

    def matches(self, path: str) -> bool:
        path = path.replace("\\", "/")
        path = path[2:] if path.startswith("./") else path
        return self._pattern.fullmatch(path) is not None

    def names(self, item: Item) -> bool:
        """A call (`*_call` with a `call_id`) that reads vouched paths only: one of its string
        arguments, or a word of one, is a vouched path, and no other word names a file, a
        folder or an address. `cat SKILL.md README.md` or `grep -r x .claude/skills src`
        puts another file's text in the same output, and that text is not the operator's."""
        known = self._recent.get(item.digest)
        if known is None:
            words = [word for text in _call_strings(item.raw) for word in _WORD.findall(text)]
            vouched = [self.matches(word) for word in words]
            known = any(vouched) and not any(
                _names_a_place(word) for word, ok in zip(words, vouched, strict=True) if not ok
            )
            if len(self._recent) >= _RECENT:
                self._recent.clear()  # one call, safe beside the other lane's thread
            self._recent[item.digest] = known
        return known


def _names_a_place(word: str) -> bool:
    """Whether a word of a call names a file, a folder or an address: it has a slash or a
    file extension, or is "." or "..". Patterns (`*.md`), options and devices are not."""
    if any(c in word for c in "*?[") or word.startswith(("-", "/dev/")):
        return False  # a pattern, an option, or /dev/null
    return word in (".", "..") or "/" in word or "\\" in word or _EXTENSION.search(word) is not None


def _call_strings(raw: dict[str, Any]) -> list[str]:
    """The strings a call's arguments hold: a function call's JSON `arguments` (or the
    string itself when it is not JSON), a custom tool's `input`, a shell call's command;
    not its working directory, which is where it runs, not what it reads."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for key, v in value.items():
                if key not in _WORKING_DIRECTORY:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    arguments = raw.get("arguments")
    if isinstance(arguments, str):
        try:
            walk(json.loads(arguments))
        except ValueError:
            found.append(arguments)
    for key in ("input", "action"):
        walk(raw.get(key))
    return found


@functools.lru_cache(maxsize=1024)
def call_key(call_id: str) -> str:
    """What the state keeps of a call id: 16 hex digits, however long the id."""
    return hashlib.blake2b(call_id.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _is_call(item: Item) -> bool:
    return item.kind.endswith("_call") and isinstance(item.raw.get("call_id"), str)


def _is_output(item: Item) -> bool:
    return item.kind.endswith("_call_output") and isinstance(item.raw.get("call_id"), str)


class Vouched(Wrapper):
    """Wraps a classifier: the outputs of vouched calls reach it as developer messages."""

    def __init__(self, inner: Classifier, paths: VouchedPaths) -> None:
        super().__init__(inner)
        self.paths = paths
        # Its own version: a snapshot folded with other globs, or none, is not this one's
        # (the Kafka monitor, the gateway's stored snapshots and the recordings compare
        # versions before resuming).
        self.version = f"{inner.version}+vouched-{_digest(paths.globs)}"
        self.max_state_bytes = inner.max_state_bytes + MAX_CALLS * 20 + 32  # keys, quoted
        # What the scorer looks for on a classifier passes through: shared batched calls
        # (the encoders) and the item memo full mode turns off (state/scoring.py unmemoised).
        if hasattr(inner, "update_batch"):
            self.update_batch = self._update_batch
        if hasattr(inner, "without_memo"):
            self.without_memo = lambda: Vouched(inner.without_memo(), paths)  # type: ignore[attr-defined]

    def initial_state(self) -> State:
        return {"calls": [], "inner": self.inner.initial_state()}

    def update(self, state: State, items: Sequence[Item]) -> Update:
        calls, seen = self._seen(state, items)
        return self._wrapped(calls, self.inner.update(_inner(state), seen))

    def _update_batch(self, requests: Sequence[tuple[State, Sequence[Item]]]) -> list[Update]:
        prepared = [self._seen(state, items) for state, items in requests]
        inner = [(_inner(state), seen) for (state, _), (_, seen) in zip(requests, prepared, strict=True)]
        updates = self.inner.update_batch(inner)  # type: ignore[attr-defined]
        return [self._wrapped(calls, upd) for (calls, _), upd in zip(prepared, updates, strict=True)]

    def _seen(self, state: State, items: Sequence[Item]) -> tuple[list[str], list[Item]]:
        """The vouched call ids after `items`, and `items` as the inner classifier sees them."""
        calls = list(state.get("calls", ()))
        seen = []
        for item in items:
            if _is_call(item) and self.paths.names(item):
                key = call_key(item.raw["call_id"])
                if key in calls:
                    calls.remove(key)
                calls.append(key)
                del calls[:-MAX_CALLS]
            elif _is_output(item) and call_key(item.raw["call_id"]) in calls:
                item = dataclasses.replace(item, role=OPERATOR_ROLE)
            seen.append(item)
        return calls, seen

    @staticmethod
    def _wrapped(calls: list[str], upd: Update) -> Update:
        return dataclasses.replace(upd, state={"calls": calls, "inner": upd.state})


def _inner(state: State) -> State:
    """The wrapped classifier's state; a state saved before the operator vouched for
    anything (a gateway restarted with `--vouch`) is the classifier's own."""
    return state["inner"] if "inner" in state and "calls" in state else state


def _digest(globs: Sequence[str]) -> str:
    return hashlib.blake2b("\n".join(globs).encode(), digest_size=4).hexdigest()


def vouched(classifiers: Sequence[Classifier], globs: Sequence[str]) -> list[Classifier]:
    """Every classifier wrapped with the operator's globs (none: unchanged), so that all
    of them judge a vouched output alike."""
    if not globs:
        return list(classifiers)
    paths = VouchedPaths(globs)
    return [Vouched(c, paths) for c in classifiers]
