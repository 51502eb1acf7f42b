"""Real benign text from fetched repositories (training/lib/real_text.py)."""

import subprocess

import pytest

from training.lib import real_text
from training.lib.real_text import Document, file_kind, repo_files, repo_history, split_of


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("README.md", "readme"),
        (".github/ISSUE_TEMPLATE/bug_report.md", "issue_template"),
        (".github/workflows/ci.yml", "ci"),
        ("CHANGELOG.md", "changelog"),
        ("CONTRIBUTING.rst", "policy"),
        ("src/pkg/client.py", "code"),
        ("docs/usage.md", "docs"),
        ("pyproject.toml", "config"),
        ("Dockerfile", "dockerfile"),
        ("node_modules/x/index.js", None),
        ("tests/fixtures/data.json", None),
        ("logo.png", None),
    ],
)
def test_file_kind(path, kind):
    assert file_kind(path) == kind


def test_a_source_lies_in_one_split_and_repositories_are_dealt_evenly():
    assert split_of("debian:git") == split_of("debian:git")
    for group in (real_text.REPOSITORIES, real_text.LLM_REPOSITORIES, *real_text._AGENT_FILE_GROUPS):
        splits = [split_of(f"repo:{r}") for r in group]
        for s in ("train", "validation", "test"):
            assert splits.count(s) >= len(splits) // 5
    assert Document("x" * 100, "debian:git", "debian_doc", "git/README").split == split_of("debian:git")


def test_a_later_group_of_agent_file_collections_moves_none_of_the_first():
    first = real_text._AGENT_FILE_GROUPS[0]
    assert [split_of(f"repo:{r}") for r in first] == ["train", "train", "train", "validation", "test"]


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A one-repository mirror in the layout fetch leaves (owner+name/repo, a git dir)."""
    work = tmp_path / "work"
    work.mkdir()

    def git(*args):
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "dev@example.org")
    git("config", "user.name", "Dev")
    (work / "README.md").write_text("# Tool\n\nA tool that does one thing well, with a long readme.\n" * 3)
    (work / "src").mkdir()
    (work / "src" / "main.py").write_text("def main():\n    '''Entry point.'''\n    return 0\n" * 5)
    git("add", ".")
    body = "Fix the parser on empty input\n\n" + "Steps to reproduce: run it with an empty file. " * 6
    git("commit", "-q", "-m", body)
    (work / "src" / "main.py").write_text("def main():\n    return 1\n" * 8)
    git("commit", "-q", "-am", "Return 1\n\n" + "Because the caller expects it. " * 8)
    root = tmp_path / "mirror"
    (root / "acme+tool").mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root / "acme+tool" / "repo")], check=True)
    return root


def test_repo_files_reads_each_kind_at_head(mirror):
    docs = repo_files("acme/tool", root=mirror)
    by_kind = {d.kind: d for d in docs}
    assert set(by_kind) == {"readme", "code"}
    assert by_kind["code"].text.startswith("def main():\n    return 1")
    assert all(d.source == "repo:acme/tool" for d in docs)


def test_repo_history_gives_commit_messages_diffs_and_log_pages(mirror):
    docs = repo_history("acme/tool", root=mirror)
    kinds = {d.kind for d in docs}
    assert {"commit", "diff", "git_log"} <= kinds
    commit = next(d for d in docs if d.kind == "commit")
    assert "\n\n" in commit.text
