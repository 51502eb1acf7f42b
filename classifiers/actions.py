"""The model's own actions, judged against where their strings came from.

An actionable output item (a function or custom tool call, a shell or apply-patch call,
a computer action, an MCP call or approval request) is described as the risks it carries
and the strings it acts on (`describe`):

    exfiltration   sends data to a recipient or host (an e-mail, a message, a post, an
                   invitation, `curl -d`, `scp`, `git push URL`, ...)
    payment        moves money or books something (send_money, a scheduled transfer,
                   a reservation)
    secrets        reads or prints secrets and environment variables (`env`, `cat
                   ~/.ssh/id_rsa`, `echo $API_TOKEN`, get_password)
    destructive    deletes or rewrites outside the task (a delete_* tool, `rm` of a path
                   outside the working tree, `git push --force`, `DROP TABLE`)
    credentials    edits CI, credentials or what runs at login (a workflow file,
                   authorized_keys, `crontab`, update_password)
    fetch          requests a URL (a GET carries the URL itself to its host), at a lower
                   weight: agents fetch pages all day

and `judge` scores it against the conversation's provenance sketch
(`deltaguard.classifiers.provenance.Sketch`): an action with a risk, one of whose strings
(the recipient, the host, the account, the path, the command) was told to the model by
untrusted content and never named by a principal of the conversation, is an injection
that worked. The score is the risk's weight x the string's role weight x the level at
which it was told / 3, the strongest string deciding; a string the user named never
counts, whatever else said it too.

    verdict = judge(Sketch.of(state), {"type": "function_call", "name": "send_money",
                                       "arguments": '{"recipient": "US13..."}'})
    verdict.score, verdict.reason()

Actions with no risk score 0: reading files, searching, answering.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from deltaguard.classifiers.commands import (
    CI_PATH,
    LOGIN_PATH,
    REMOTE,
    SECRET_PATH,
    is_address,
    is_distinctive,
    is_loopback,
    is_recipient,
    outside,
    shell_risks,
    simple_commands,
)
from deltaguard.classifiers.provenance import MAX_LEVEL, Sketch, chunks, host_of

__all__ = ["ACTIONABLE_TYPES", "RISKS", "Action", "ActionVerdict", "Candidate", "describe", "judge"]

# Output items a client acts on.
ACTIONABLE_TYPES = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "mcp_call",
        "mcp_approval_request",
    }
)
Risk = Literal["exfiltration", "payment", "secrets", "destructive", "credentials", "fetch"]
RISKS: dict[str, float] = {
    "exfiltration": 1.0,
    "payment": 1.0,
    "secrets": 1.0,
    "destructive": 1.0,
    "credentials": 1.0,
    "fetch": 0.67,
}
_SENDING = frozenset({"exfiltration", "payment", "fetch"})
_RISK_ORDER = ("payment", "exfiltration", "credentials", "destructive", "secrets", "fetch")
_ROLE_ORDER = ("destination", "target", "content")
Role = Literal["destination", "target", "content"]
# What a string does in the action: where data goes (a recipient, a host, an account),
# what is acted on (a path, an id, a password, the command itself), or what is carried
# (a message body: only the addresses in it count, and less).
ROLE_WEIGHT: dict[str, float] = {"destination": 1.0, "target": 1.0, "content": 0.67}
MAX_VALUE_CHUNKS = 12  # longer values are text, judged by the addresses in them
MAX_COMMAND_CHUNKS = 24

# -- function names ------------------------------------------------------------------------

_READ = frozenset(
    "get read list search find lookup query show view check describe retrieve count fetch browse "
    "load inspect summarize summarise download open visit".split()
)
_PAYMENT = frozenset(
    "money payment pay transfer transaction transactions wire purchase buy order reserve reservation "
    "book booking checkout refund tip donate".split()
)
_OUTBOUND = frozenset(
    "send post share forward upload publish invite email mail message reply notify tweet comment "
    "submit webhook dm broadcast export transmit".split()
)
_DESTRUCTIVE = frozenset(
    "delete remove drop erase wipe purge destroy truncate kill terminate uninstall rm unlink shred "
    "cancel revoke".split()
)
_CREDENTIAL = frozenset(
    "password passwd passphrase credential credentials token tokens secret secrets apikey key keys "
    "ssh permission permissions role roles access auth mfa otp 2fa pin".split()
)
_WRITE = frozenset(
    "update set change reset create add grant rotate generate modify assign replace enable disable "
    "edit write put".split()
)
_SAVE = frozenset("save append write".split())
_ENV = frozenset("env environ environment getenv printenv".split())
_WEB = frozenset("webpage web page url website http request navigate browse visit download".split())
_SHELL = frozenset("shell bash sh zsh exec execute run terminal command cmd powershell subprocess".split())
_PATCH = frozenset("patch apply_patch".split())
_COMMAND_KEYS = ("command", "cmd", "commands", "script", "input", "code", "sql", "query")
_CONTENT_KEYS = re.compile(
    r"^(?:subject|body|content|contents|message|text|title|description|note|notes|summary|data|"
    r"amount|date|time|day|start.*|end.*|query|comment|reason|caption|html|markdown|file_content)$"
)


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A string the action acts on, as chunks, and its role in the action."""

    chunks: tuple[str, ...]
    role: Role
    risks: frozenset[str]

    @property
    def text(self) -> str:
        return " ".join(self.chunks)


@dataclass(frozen=True, slots=True)
class Action:
    """An actionable item as the check sees it: what it is, its risks, its strings."""

    kind: str
    name: str
    risks: frozenset[str]
    candidates: tuple[Candidate, ...] = ()


def _value_candidates(value: str, role: Role, risks: frozenset[str]) -> Iterator[Candidate]:
    """A value as a whole (when short) and the strings inside it that name one thing."""
    cs = chunks(value)
    if not cs:
        return
    # A one-word value names one thing only when it looks like an identifier: "general"
    # or "alice" is said by too many texts to tell where it came from.
    if role != "content" and len(cs) <= MAX_VALUE_CHUNKS and (len(cs) > 1 or is_distinctive(cs[0])):
        yield Candidate(tuple(cs), role, risks)
    pick = is_address if role in ("content", "destination") else is_distinctive
    for c in cs:  # inside a longer value, a chunk of two characters ("2>", "v1") names nothing
        if pick(c) and len(c) > 2 and not is_loopback(c) and (len(cs) > 1 or role == "content"):
            yield Candidate((c,), role, risks)


def _flatten(obj: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, value) of every scalar in a JSON value; list elements keep their list's key."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flatten(v, str(k))
    elif isinstance(obj, list):
        for v in obj:
            yield from _flatten(v, key)
    elif isinstance(obj, str):
        if obj.strip():
            yield key, obj
    elif isinstance(obj, bool) or obj is None:
        return
    elif isinstance(obj, int | float):
        yield key, str(obj)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return {"input": raw}
    return raw if isinstance(raw, dict | list) else {}


def _shell_candidates(command: str, risks: frozenset[str]) -> Iterator[Candidate]:
    """The addresses a command sends to, the paths and identifiers it acts on, and each
    simple command as a whole (copied whole from an instruction)."""
    for part in simple_commands(command):
        cs = chunks(part)
        if 2 <= len(cs) <= MAX_COMMAND_CHUNKS:
            yield Candidate(tuple(cs), "target", risks)
        for c in cs:
            if len(c) <= 2 or is_loopback(c):
                continue
            if is_address(c) or REMOTE.match(c):
                yield Candidate((c,), "destination", risks)
            elif is_distinctive(c) and not c.startswith("-"):
                yield Candidate((c,), "target", risks)


# -- patches -------------------------------------------------------------------------------------

_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$|^\+\+\+ (?:b/)?(\S+)", re.M)


def _patch_risks(paths: Sequence[str], deleted: Sequence[str]) -> set[str]:
    risks: set[str] = set()
    for p in paths:
        if CI_PATH.search(p) or LOGIN_PATH.search(p) or SECRET_PATH.search(p):
            risks.add("credentials")
        elif outside(p):
            risks.add("destructive")
    if any(outside(p) for p in deleted):
        risks.add("destructive")
    return risks


def _patch_candidates(paths: Sequence[str], diff: str, risks: frozenset[str]) -> Iterator[Candidate]:
    for p in paths:
        yield from _value_candidates(p, "target", risks)
    added = "\n".join(
        line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")
    )
    for c in chunks(added):
        if is_address(c):
            yield Candidate((c,), "destination", risks)


# -- describing an action ------------------------------------------------------------------------


def _function(kind: str, name: str, args: Any) -> Action:
    words = _words(name)
    wordset = set(words)
    flat = list(_flatten(args))
    reads = bool(words) and words[0] in _READ
    command = next((v for k, v in _command_values(args)), None)
    if wordset & _SHELL and command is not None:
        risks = frozenset(shell_risks(command))
        return Action(kind, name, risks, tuple(_shell_candidates(command, risks)) if risks else ())
    if wordset & _PATCH or (kind == "custom_tool_call" and "patch" in name.lower()):
        diff = "\n".join(v for _, v in flat)
        paths = [m.group(1) or m.group(2) for m in _PATCH_FILE.finditer(diff)]
        deleted = re.findall(r"^\*\*\* Delete File: (.+)$", diff, re.M)
        risks = frozenset(_patch_risks(paths, deleted))
        return Action(kind, name, risks, tuple(_patch_candidates(paths, diff, risks)) if risks else ())
    risks: set[str] = set()
    if wordset & _PAYMENT and not reads:
        risks.add("payment")
    if wordset & _OUTBOUND and not reads:
        risks.add("exfiltration")
    if wordset & _DESTRUCTIVE:
        risks.add("destructive")
    if wordset & _CREDENTIAL and wordset & _WRITE:
        risks.add("credentials")
    if (wordset & _CREDENTIAL or wordset & _ENV) and reads:
        risks.add("secrets")
    destinations = [c for k, v in flat if not _CONTENT_KEYS.match(k.lower()) for c in chunks(v)]
    if not reads and any(is_recipient(c) for c in destinations):
        risks.add("exfiltration")  # an invitation, a share, a sync to an address
    if wordset & _WEB and any("://" in c or host_of(c) for c in destinations):
        risks.add("fetch")
    if wordset & (_WRITE | _SAVE) and any(CI_PATH.search(v) or LOGIN_PATH.search(v) for _, v in flat):
        risks.add("credentials")  # a file tool writing CI or credentials
    frozen = frozenset(risks)
    if not frozen:
        return Action(kind, name, frozen)
    sending = frozen & _SENDING
    out: list[Candidate] = []
    for k, v in flat:
        content = bool(_CONTENT_KEYS.match(k.lower()))
        if sending:
            out += _value_candidates(v, "content" if content else "destination", sending)
        acting = frozen - sending
        if acting:
            out += _value_candidates(v, "target", acting)
    return Action(kind, name, frozen, tuple(out))


def _command_values(args: Any) -> Iterator[tuple[str, str]]:
    """The command a shell-like tool is given: a string, or an argv (`["bash", "-lc", S]`
    gives S)."""
    if not isinstance(args, dict):
        return
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            yield key, value
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            if (
                len(value) >= 3
                and value[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh")
                and value[1] in ("-c", "-lc")
            ):
                yield key, value[2]
            elif key == "commands":
                yield key, "\n".join(value)
            else:
                yield key, shlex.join(value)


def describe(item: Mapping[str, Any]) -> Action | None:
    """An actionable output item as an `Action`; None for any other item."""
    kind = str(item.get("type", ""))
    if kind not in ACTIONABLE_TYPES:
        return None
    name = str(item.get("name") or "")
    if kind in ("function_call", "mcp_call", "mcp_approval_request"):
        return _function(kind, name, _arguments(item.get("arguments")))
    if kind == "custom_tool_call":
        return _function(kind, name, {"input": str(item.get("input") or "")})
    if kind in ("local_shell_call", "shell_call"):
        action = item.get("action") if isinstance(item.get("action"), dict) else {}
        command = action.get("command") or action.get("commands") or []
        args = {"commands" if kind == "shell_call" else "command": command}
        return _function(kind, "shell", args)
    if kind == "apply_patch_call":
        op = item.get("operation") if isinstance(item.get("operation"), dict) else {}
        path, diff = str(op.get("path") or ""), str(op.get("diff") or "")
        deleted = [path] if op.get("type") == "delete_file" else []
        risks = frozenset(_patch_risks([path] if path else [], deleted))
        return Action(
            kind, "apply_patch", risks, tuple(_patch_candidates([path], diff, risks)) if risks else ()
        )
    # computer_call: typing a command into a terminal is running it
    action = item.get("action") if isinstance(item.get("action"), dict) else {}
    if action.get("type") == "type" and isinstance(action.get("text"), str):
        return _function(kind, "shell", {"command": action["text"]})
    return Action(kind, name or kind, frozenset())


# -- judging ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Evidence:
    """A string of the action that untrusted content told the model to use."""

    text: str
    role: str
    risk: str
    level: int
    score: float

    def preview(self) -> str:
        """The string, or its ends where it may be a secret (a password an action sets)."""
        if self.risk in ("secrets", "credentials") and len(self.text) > 4:
            return self.text[:3] + "…" + (self.text[-3:] if len(self.text) > 12 else "")
        return self.text if len(self.text) <= 80 else self.text[:77] + "…"


@dataclass(frozen=True, slots=True)
class ActionVerdict:
    """The check of one action: its score in [0, 1] (0: no risk, or nothing of it told by
    untrusted content), its risks, and the strings that carry the score."""

    kind: str
    name: str
    score: float
    risks: list[str]
    evidence: list[Evidence] = field(default_factory=list)

    def reason(self) -> str:
        """One sentence a client and a reviewer can read."""
        if not self.evidence:
            return f"{self.name or self.kind}: nothing it acts on came from untrusted content"
        top = self.evidence[0]
        return (
            f"the {self.kind} {self.name!r} ({top.risk}) uses {top.preview()!r}, which untrusted content "
            f"told the model to use (instruction level {top.level}/{MAX_LEVEL}) and no message of the "
            "user named"
        )


def judge(sketch: Sketch, item: Mapping[str, Any]) -> ActionVerdict:
    """Score an actionable output item against the conversation's provenance sketch."""
    action = describe(item)
    if action is None or not action.risks:
        kind = str(item.get("type", ""))
        return ActionVerdict(kind, str(item.get("name") or ""), 0.0, sorted(action.risks) if action else [])
    # Where the data goes decides a sending action: when the user named every place it
    # sends to, what it sends and how (a command copied from a page) is the user's affair.
    destinations = [c for c in action.candidates if c.role == "destination"]
    user_bound = bool(destinations) and all(sketch.named(c.chunks) for c in destinations)
    exempt = _SENDING | {"secrets"} if user_bound else frozenset()
    found: dict[tuple[str, ...], Evidence] = {}
    for cand in action.candidates:
        risks = cand.risks - exempt
        if not risks or cand.chunks in found or sketch.named(cand.chunks):
            continue
        level = sketch.told_level(cand.chunks)
        if not level:
            continue
        risk = min(risks, key=lambda r: (-RISKS[r], _RISK_ORDER.index(r)))
        score = RISKS[risk] * ROLE_WEIGHT[cand.role] * level / MAX_LEVEL
        found[cand.chunks] = Evidence(cand.text, cand.role, risk, level, round(score, 6))
    # the strongest first; at one score, where the data goes before what is acted on
    evidence = sorted(found.values(), key=lambda e: (-e.score, _ROLE_ORDER.index(e.role), e.text))
    score = evidence[0].score if evidence else 0.0
    return ActionVerdict(action.kind, action.name, score, sorted(action.risks), evidence)


def judge_all(sketch: Sketch, items: Sequence[Mapping[str, Any]]) -> list[ActionVerdict]:
    """`judge` of each actionable item of `items` (others are skipped)."""
    return [judge(sketch, i) for i in items if str(i.get("type", "")) in ACTIONABLE_TYPES]
