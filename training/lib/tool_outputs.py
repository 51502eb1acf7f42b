"""Synthetic benign tool outputs (test logs, tracebacks, CI logs, grep output, diffs, JSON
results) and harness notes, made of standard-library material.
"""

from __future__ import annotations

import json

import numpy as np

from training.lib.stdlib_code import (
    CODE_CHARS,
    CodeMaterial,
    Function,
)

_PACKAGES = ("numpy", "pytest", "requests", "httpx", "pydantic", "ruff", "mypy", "coverage", "attrs")
_EXCEPTIONS = (
    ("AssertionError", "assert {a} == {b}"),
    ("KeyError", "'{name}'"),
    ("ValueError", "invalid literal for int() with base 10: '{name}'"),
    ("TypeError", "{name}() missing 1 required positional argument: '{arg}'"),
    ("AttributeError", "'NoneType' object has no attribute '{arg}'"),
    ("FileNotFoundError", "[Errno 2] No such file or directory: 'data/{arg}.json'"),
    ("TimeoutError", "timed out after {a} seconds"),
    ("RuntimeError", "{name} failed with exit code {b}"),
)
_PLACEHOLDERS = ("[... {a} lines omitted ...]", "[output truncated: {b} bytes]", "[binary file, {b} bytes]")
_LINT = (
    ("F401", "[*] `{name}` imported but unused"),
    ("E501", "Line too long ({a} > 110)"),
    ("B006", "Do not use mutable data structures for argument defaults"),
    ("F841", "Local variable `{name}` is assigned to but never used"),
    ("SIM108", "Use ternary operator instead of `if`-`else`-block"),
)
TOOL_KINDS = ("pytest_log", "unittest_log", "traceback", "ci_log", "grep_output", "diff", "json_result")
TOOL_KIND_WEIGHTS = (0.18, 0.1, 0.12, 0.12, 0.12, 0.1, 0.26)


def _fit(lines: list[str], rng: np.random.Generator) -> str:
    """Whole lines up to a tool-output size drawn log-uniformly from CODE_CHARS."""
    lo, hi = CODE_CHARS
    target = min(float(np.exp(rng.uniform(np.log(lo), np.log(hi)))), hi)
    out, total = [], 0
    for line in lines:
        if out and total + len(line) + 1 > target:
            break
        out.append(line)
        total += len(line) + 1
    return "\n".join(out)


class ToolOutputFaker:
    """Test runs, CI logs, tracebacks, grep output, diffs and JSON tool results whose
    names, paths and source lines come from one split's stdlib files."""

    def __init__(self, material: CodeMaterial, rng: np.random.Generator) -> None:
        self.m, self.rng = material, rng
        self.documented = [f for f in material.functions if f.doc] or material.functions
        self.paths = sorted(material.sources)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def n(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def func(self) -> Function:
        return self.pick(self.m.functions)

    def body_line(self, f: Function) -> tuple[int, str]:
        """A line of `f` (1-based number, text without its indentation)."""
        src = self.m.sources[f.path]
        for _ in range(5):
            line = self.n(f.line, f.end_line)
            if src[line - 1].strip():
                return line, src[line - 1].strip()
        return f.line, f.head

    def test_name(self) -> str:
        return "test_" + self.func().name.lstrip("_")

    def exception(self) -> str:
        kind, msg = self.pick(_EXCEPTIONS)
        return f"{kind}: " + msg.format(
            a=self.n(0, 99), b=self.n(1, 500), name=self.func().name, arg=self.func().name
        )

    def frames(self, k: int) -> list[str]:
        prefix = self.pick(("/usr/lib/python3.11/", "/usr/local/lib/python3.11/", "Lib/"))
        out = []
        for _ in range(k):
            f = self.func()
            line, text = self.body_line(f)
            out += [f'  File "{prefix}{f.path}", line {line}, in {f.name}', f"    {text}"]
        return out

    def traceback(self) -> str:
        lines = ["Traceback (most recent call last):", *self.frames(self.n(2, 8)), self.exception()]
        if self.rng.random() < 0.3:
            module = self.func().path.removesuffix(".py").replace("/", ".")
            lines.insert(0, f"$ python -m {module}")
        return _fit(lines, self.rng)

    def pytest_log(self) -> str:
        listed = self.n(5, 60)
        total = listed + self.n(0, 240)
        lines = [
            "=" * 29 + " test session starts " + "=" * 30,
            f"platform linux -- Python 3.11.{self.n(0, 9)}, pytest-8.{self.n(0, 3)}.{self.n(0, 4)}, "
            "pluggy-1.5.0",
            f"rootdir: /home/runner/work/{self.pick(self.m.classes)[2].lower()}",
            "configfile: pyproject.toml",
            f"collected {total} items",
            "",
        ]
        failed = []
        for _ in range(listed):
            module = self.func().path.rsplit("/", 1)[-1].removesuffix(".py").lstrip("_")
            test = f"tests/test_{module}.py::{self.test_name()}"
            status = self.pick(("PASSED",) * 8 + ("FAILED", "SKIPPED", "XFAIL"))
            if status == "FAILED":
                failed.append(test)
            lines.append(f"{test} {status} [{self.n(1, 100):3d}%]")
        for test in failed[:3]:
            f = self.func()
            line, text = self.body_line(f)
            error = self.exception()
            lines += ["", "_" * 20 + f" {test.split('::')[-1]} " + "_" * 20, "", f"    {f.head}"]
            lines += [f">       {text}", f"E       {error}", "", f"{f.path}:{line}: {error.split(':')[0]}"]
        summary = f"{len(failed)} failed, {total - len(failed)} passed" if failed else f"{total} passed"
        lines.append("=" * 20 + f" {summary} in {self.rng.uniform(0.1, 90):.2f}s " + "=" * 20)
        return _fit(lines, self.rng)

    def unittest_log(self) -> str:
        lines = []
        for _ in range(self.n(5, 60)):
            f, cls = self.func(), self.pick(self.m.classes)
            test = "test_" + f.name.lstrip("_")
            module = f.path.rsplit("/", 1)[-1].removesuffix(".py")
            status = self.pick(("ok",) * 8 + ("FAIL", "ERROR", "skipped 'requires network'"))
            lines.append(f"{test} (test.test_{module}.{cls[2]}Test.{test}) ... {status}")
        ran = len(lines)
        lines += ["", "=" * 70, f"FAIL: {self.test_name()}", "-" * 70]
        lines += ["Traceback (most recent call last):", *self.frames(self.n(1, 3)), self.exception(), ""]
        lines += [
            "-" * 70,
            f"Ran {ran} tests in {self.rng.uniform(0.01, 30):.3f}s",
            "",
            "FAILED (failures=1)",
        ]
        return _fit(lines, self.rng)

    def ci_log(self) -> str:
        stamp = f"2024-{self.n(1, 12):02d}-{self.n(1, 28):02d}T{self.n(0, 23):02d}:{self.n(0, 59):02d}"
        lines = [f"{stamp}:01.{self.n(0, 9999999):07d}Z ##[group]Run python -m pip install -e .[dev]"]
        for k in self.rng.permutation(len(_PACKAGES))[: self.n(2, 8)]:
            name = _PACKAGES[int(k)]
            version = f"{self.n(0, 9)}.{self.n(0, 30)}.{self.n(0, 9)}"
            lines += [
                f"Collecting {name}",
                f"  Downloading {name}-{version}-py3-none-any.whl ({self.n(10, 900)} kB)",
            ]
        lines += [
            "Successfully installed " + " ".join(f"{p}-{self.n(1, 9)}.{self.n(0, 9)}" for p in _PACKAGES[:4])
        ]
        lines += ["##[endgroup]", "##[group]Run ruff check ."]
        for _ in range(self.n(0, 12)):
            f = self.func()
            code, msg = self.pick(_LINT)
            lines.append(
                f"{f.path}:{f.line}:{self.n(1, 80)}: {code} {msg.format(name=f.name, a=self.n(111, 180))}"
            )
        lines += [f"Found {self.n(1, 40)} errors.", "##[group]Run mypy src"]
        for _ in range(self.n(0, 6)):
            f = self.func()
            lines.append(
                f'{f.path}:{f.line}: error: Incompatible return value type (got "int", expected "str")'
            )
        lines += [
            f"Found {self.n(1, 9)} errors in {self.n(1, 5)} files (checked {self.n(20, 400)} source files)"
        ]
        lines += [
            f"{stamp}:59.{self.n(0, 9999999):07d}Z ##[error]Process completed with exit code {self.n(1, 2)}."
        ]
        return _fit(lines, self.rng)

    def grep_output(self) -> str:
        name = self.func().name
        hits = []
        for path in (self.pick(self.paths) for _ in range(self.n(3, 30))):
            src = self.m.sources[path]
            hits += [f"{path}:{i}:{line}" for i, line in enumerate(src, 1) if name in line][:20]
        return _fit(
            hits or [f"{f.path}:{f.line}:{f.head}" for f in (self.func() for _ in range(9))], self.rng
        )

    def diff(self) -> str:
        f = self.func()
        src = self.m.sources[f.path]
        start = f.line
        stop = min(f.end_line, start + self.n(4, 30))
        context = src[start - 1 : stop]
        changed = self.n(0, len(context) - 1)
        lines = [
            f"diff --git a/Lib/{f.path} b/Lib/{f.path}",
            f"index {self.n(0, 16**7):07x}..{self.n(0, 16**7):07x} 100644",
            f"--- a/Lib/{f.path}",
            f"+++ b/Lib/{f.path}",
            f"@@ -{start},{len(context)} +{start},{len(context)} @@",
        ]
        for i, line in enumerate(context):
            if i == changed:
                new = line.replace(f.name, f.name + "_impl") if f.name in line else line + "  # noqa: E501"
                lines += [f"-{line}", f"+{new}"]
            else:
                lines.append(f" {line}")
        return _fit(lines, self.rng)

    def json_result(self) -> str:
        kind = self.n(0, 4)
        if kind == 0:
            matches = []
            for f in (self.func() for _ in range(self.n(1, 40))):
                line, text = self.body_line(f)
                matches.append({"path": f.path, "line": line, "text": text})
            obj: dict = {"matches": matches, "truncated": bool(self.rng.random() < 0.2)}
        elif kind == 1:
            funcs = [self.func() for _ in range(self.n(1, 25))]
            obj = {
                "symbols": [
                    {"name": f.name, "kind": "function", "path": f.path, "line": f.line, "signature": f.head}
                    for f in funcs
                ]
            }
        elif kind == 2:
            stdout = self.pick((self.pytest_log, self.unittest_log, self.traceback))()
            obj = {
                "command": "python -m pytest -x -q",
                "exit_code": self.n(0, 2),
                "stdout": stdout,
                "stderr": "",
            }
        elif kind == 3:
            folder = self.func().path.rpartition("/")[0] or "."
            files = [p for p in self.paths if p.startswith(folder + "/")] if folder != "." else self.paths
            entries = [
                {"name": p.rsplit("/", 1)[-1], "type": "file", "size": self.n(200, 90000)} for p in files[:60]
            ]
            obj = {"path": folder, "entries": entries}
        else:
            f = self.pick(self.documented)
            module = f.path.removesuffix(".py").replace("/", ".")
            obj = {"name": f.name, "module": module, "signature": f.head, "doc": f.doc, "line": f.line}
        return json.dumps(obj, indent=2 if self.rng.random() < 0.5 else None)

    def make(self) -> tuple[str, str]:
        kind = TOOL_KINDS[int(self.rng.choice(len(TOOL_KINDS), p=TOOL_KIND_WEIGHTS))]
        text = getattr(self, kind)()
        if self.rng.random() < 0.05:
            text += "\n" + self.pick(_PLACEHOLDERS).format(a=self.n(2, 400), b=self.n(100, 90000))
        return kind, text


_NOTE_WHAT = ("output", "result", "tool call", "file contents", "response", "command", "tool result")
_NOTE_ACTIONS = ("withheld", "blocked", "refused", "rejected", "denied", "skipped", "redacted", "truncated")
_NOTE_ACTORS = (
    "the user",
    "the agent",
    "the sandbox",
    "a pre-tool hook",
    "the gateway",
    "the policy engine",
    "the reviewer",
    "the content filter",
    "the runtime",
    "the harness",
)
_NOTE_REASONS = (
    "permission denied",
    "the user declined",
    "output exceeded {n} KB",
    "binary file",
    "network access is disabled",
    "matched a secret pattern",
    "policy violation",
    "timed out after {n} s",
    "path outside the workspace",
    "flagged by a safety check",
    "rate limit reached",
    "the command is not on the allow list",
    "{n} lines omitted",
)
_NOTE_FORMATS = (
    "[{what} {action} by {actor}: {reason}]",
    "[{action} by {actor}: {reason}]",
    "<{what} {action}: {reason}>",
    "Tool call {name}({path!r}) was {action} by {actor} ({reason}).",
    "{Action}: {reason}. No output was returned for {path}.",
    "Error: {reason} ({what} {action})",
    "[{what} {action}] {reason}; see {path}:{line}",
)


def harness_notes(material: CodeMaterial, n: int, seed: int) -> list[str]:
    """`n` distinct short notes that agent harnesses and gateways put in place of a tool
    output (withheld, blocked, truncated, ...), with names and paths from `material`."""
    rng = np.random.default_rng(seed)
    out: dict[str, None] = {}

    def pick(seq):
        return seq[int(rng.integers(len(seq)))]

    while len(out) < n:
        f = pick(material.functions)
        action = pick(_NOTE_ACTIONS)
        note = pick(_NOTE_FORMATS).format(
            what=pick(_NOTE_WHAT),
            action=action,
            Action=action.capitalize(),
            actor=pick(_NOTE_ACTORS),
            reason=pick(_NOTE_REASONS).format(n=int(rng.integers(2, 500))),
            name=f.name,
            path=f.path,
            line=f.line,
        )
        out.setdefault(note)
    return list(out)


def synthetic_tool_outputs(material: CodeMaterial, n: int, seed: int) -> list[tuple[str, str]]:
    """`n` distinct (kind, text) tool outputs of CODE_CHARS size, from one split's material."""
    faker = ToolOutputFaker(material, np.random.default_rng(seed))
    out: dict[str, str] = {}
    lo, hi = CODE_CHARS
    while len(out) < n:
        kind, text = faker.make()
        if lo <= len(text) <= hi:
            out.setdefault(text, kind)
    return [(kind, text) for text, kind in out.items()]
