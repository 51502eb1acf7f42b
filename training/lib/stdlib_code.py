"""Python standard-library source as benign code: chunks of each file in the shapes a tool
returns them (plain, numbered, JSON), split by file, and the material (names,
functions, imports) the synthetic tool outputs are made of.
"""

from __future__ import annotations

import ast
import hashlib
import json
import platform
import sysconfig
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from training.lib.lexical_spec import SEED, SPLITS

# Python standard library source as benign code and tool outputs (an addition beyond
# docs/data.md, see the section "an addition beyond docs/data.md" below). Test packages are left
# out: they are full of deliberately odd strings and would dominate.
STDLIB_EXCLUDED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages"})
CODE_SPLIT = (0.8, 0.1, 0.1)  # by file, from a hash of the file's path
CODE_CHARS = (200, 4000)  # tool-output sizes of code chunks and synthetic outputs
CODE_SHAPES = ("plain", "numbered", "json_file", "json_string")
CODE_SHAPE_WEIGHTS = (0.5, 0.25, 0.15, 0.1)
CODE_CHUNKS_PER_FILE = 12  # so that a few huge files (codec tables, pydoc topics) do not dominate


@dataclass
class CodeChunk:
    path: str  # relative to the stdlib directory
    first_line: int  # 1-based line of the file where the chunk starts
    text: str  # as a tool would return it (see CODE_SHAPES)
    shape: str


class Function(NamedTuple):
    path: str
    line: int
    end_line: int
    name: str
    head: str  # the `def` line
    doc: str  # first paragraph of the docstring, or ""


@dataclass
class CodeMaterial:
    """One split's stdlib files: their lines, functions and classes."""

    sources: dict[str, list[str]] = field(default_factory=dict)
    functions: list[Function] = field(default_factory=list)
    classes: list[tuple[str, int, str]] = field(default_factory=list)  # path, line, name


def stdlib_root() -> Path:
    """The standard library of the interpreter running the recipe."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path) -> list[str]:
    """Relative paths of the stdlib's .py files, without test packages and site-packages."""
    out = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if not any(part in STDLIB_EXCLUDED_DIRS for part in rel.parts[:-1]):
            out.append(rel.as_posix())
    return sorted(out)


def code_split(rel: str) -> str:
    """The split of a stdlib file, from a hash of its relative path (stable, by file)."""
    bucket = int(hashlib.sha256(rel.encode("utf-8")).hexdigest(), 16) % 100
    if bucket < round(CODE_SPLIT[2] * 100):
        return "test"
    if bucket < round((CODE_SPLIT[1] + CODE_SPLIT[2]) * 100):
        return "validation"
    return "train"


def _file_rng(rel: str, salt: int) -> np.random.Generator:
    return np.random.default_rng([SEED, salt, int(hashlib.sha256(rel.encode("utf-8")).hexdigest()[:15], 16)])


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _by_lines(cum: np.ndarray, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """Consecutive line spans covering [start, end] of at most `limit` characters each
    (a single longer line is a span of its own). `cum[i]`: characters in lines 1..i."""
    spans = []
    while start <= end:
        stop = int(np.searchsorted(cum, cum[start - 1] + limit, side="right")) - 1
        stop = min(max(stop, start), end)
        spans.append((start, stop))
        start = stop + 1
    return spans


def code_atoms(
    cum: np.ndarray, body: list[ast.stmt], first: int, last: int, limit: int
) -> list[tuple[int, int]]:
    """Line spans covering lines first..last, each of at most `limit` characters: whole
    statements where they fit (the comments above a statement go with it); a class or
    function that does not fit becomes its header with its docstring, then its body
    statements, recursively; any other statement that does not fit is cut at lines."""
    if not body:
        return _by_lines(cum, first, last, limit) if first <= last else []
    atoms: list[tuple[int, int]] = []
    start = first
    for i, node in enumerate(body):
        end = last if i == len(body) - 1 else max(node.end_lineno or start, start)
        if cum[end] - cum[start - 1] <= limit:
            atoms.append((start, end))
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and len(node.body) > 1:
            rest = node.body[1:] if _is_docstring(node.body[0]) else node.body
            header_end = rest[0].lineno - 1
            atoms += _by_lines(cum, start, header_end, limit)
            atoms += code_atoms(cum, rest, header_end + 1, end, limit)
        else:
            atoms += _by_lines(cum, start, end, limit)
        start = end + 1
    return atoms


def shape_code(rel: str, lines: list[str], first_line: int, shape: str) -> str:
    """Source lines as a tool shows them: plain (`cat`), numbered (`cat -n`), in JSON."""
    body = "\n".join(lines)
    if shape == "plain":
        return body
    if shape == "numbered":
        return "\n".join(f"{first_line + i:6d}\t{line}" for i, line in enumerate(lines))
    if shape == "json_file":
        last = first_line + len(lines) - 1
        return json.dumps({"path": rel, "start_line": first_line, "end_line": last, "content": body})
    return json.dumps(body)  # json_string: the content as one JSON string


def file_code_chunks(rel: str, lines: list[str], tree: ast.Module) -> list[CodeChunk]:
    """A stdlib file cut into chunks of CODE_CHARS characters, each in one CODE_SHAPES
    shape; chunk sizes are drawn log-uniformly, and chunks end between statements."""
    cum = np.concatenate([[0], np.cumsum([len(line) + 1 for line in lines])])
    rng = _file_rng(rel, 1)
    lo, hi = CODE_CHARS
    raw_max = int(hi * 0.85)  # headroom for line numbers and JSON escaping
    atoms = code_atoms(cum, tree.body, 1, len(lines), raw_max)
    chunks = []
    i = 0
    while i < len(atoms):
        target = float(np.exp(rng.uniform(np.log(lo), np.log(raw_max))))
        start, end = atoms[i]
        i += 1
        while (
            i < len(atoms)
            and cum[end] - cum[start - 1] < target
            and cum[atoms[i][1]] - cum[start - 1] <= raw_max
        ):
            end = atoms[i][1]
            i += 1
        while start < end and not lines[start - 1].strip():
            start += 1
        while end > start and not lines[end - 1].strip():
            end -= 1
        shape = CODE_SHAPES[int(rng.choice(len(CODE_SHAPES), p=CODE_SHAPE_WEIGHTS))]
        text = shape_code(rel, lines[start - 1 : end], start, shape)
        while len(text) > hi and end > start:
            end -= 1
            text = shape_code(rel, lines[start - 1 : end], start, shape)
        if lo <= len(text) <= hi:
            chunks.append(CodeChunk(rel, start, text, shape))
    return chunks


def _add_material(rel: str, lines: list[str], tree: ast.Module, material: CodeMaterial) -> None:
    material.sources[rel] = lines
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            doc = (ast.get_docstring(node) or "").strip().split("\n\n")[0]
            end = node.end_lineno or node.lineno
            material.functions.append(
                Function(rel, node.lineno, end, node.name, lines[node.lineno - 1].strip(), doc)
            )
        elif isinstance(node, ast.ClassDef):
            material.classes.append((rel, node.lineno, node.name))


def load_stdlib_code(root: Path) -> tuple[dict[str, list[CodeChunk]], dict[str, CodeMaterial], dict]:
    """Chunks (at most CODE_CHUNKS_PER_FILE per file) and material per split, and stats."""
    chunks: dict[str, list[CodeChunk]] = {s: [] for s in SPLITS}
    material = {s: CodeMaterial() for s in SPLITS}
    files: Counter = Counter()
    digest = hashlib.sha256()
    skipped = []
    for rel in stdlib_files(root):
        raw = (root / rel).read_bytes()
        try:
            source = raw.decode("utf-8")
            tree = ast.parse(source)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            skipped.append(rel)
            continue
        digest.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(raw).digest())
        split = code_split(rel)
        files[split] += 1
        lines = source.splitlines()
        found = file_code_chunks(rel, lines, tree)
        if len(found) > CODE_CHUNKS_PER_FILE:
            keep = np.sort(_file_rng(rel, 2).choice(len(found), CODE_CHUNKS_PER_FILE, replace=False))
            found = [found[int(k)] for k in keep]
        chunks[split].extend(found)
        _add_material(rel, lines, tree, material[split])
    stats = {
        "root": str(root),
        "python": platform.python_version(),
        "files": {s: files[s] for s in SPLITS},
        "files_skipped_unparsable": skipped,
        "chunks": {s: len(chunks[s]) for s in SPLITS},
        "shapes": {s: dict(sorted(Counter(c.shape for c in chunks[s]).items())) for s in SPLITS},
        "sha256_of_files": digest.hexdigest(),
    }
    return chunks, material, stats
