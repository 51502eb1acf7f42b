"""The real-text lock: which sources moved since the models and evaluations were built."""

from __future__ import annotations

from training.lib.real_text import Document
from training.lib.real_text_lock import digests, drift, write


def doc(source: str, name: str, text: str) -> Document:
    return Document(text, source, "readme", name)


DOCS = [
    doc("repo:a/b", "README.md", "hello"),
    doc("repo:a/b", "setup.py", "x = 1"),
    doc("deb:curl", "NEWS", "n"),
]


def test_digests_do_not_depend_on_reading_order():
    assert digests(DOCS) == digests(list(reversed(DOCS)))
    assert digests(DOCS)["repo:a/b"]["documents"] == 2


def test_drift_names_changed_missing_and_added_sources(tmp_path):
    lock = tmp_path / "lock.json"
    write(DOCS, lock)
    assert not drift(DOCS, lock)
    assert drift(DOCS, lock).summary() == "real text: matches the lock"
    moved = [doc("repo:a/b", "README.md", "hello, again"), DOCS[1], doc("deb:jq", "NEWS", "n")]
    found = drift(moved, lock)
    assert (found.changed, found.missing, found.added) == (("repo:a/b",), ("deb:curl",), ("deb:jq",))
    assert "1 changed (repo:a/b)" in found.summary()


def test_a_renamed_document_is_a_change(tmp_path):
    lock = tmp_path / "lock.json"
    write(DOCS, lock)
    renamed = [doc("repo:a/b", "README.rst", "hello"), *DOCS[1:]]
    assert drift(renamed, lock).changed == ("repo:a/b",)


def test_without_a_lock_every_source_is_unpinned(tmp_path):
    found = drift(DOCS, tmp_path / "absent.json")
    assert found.added == ("deb:curl", "repo:a/b") and not found.changed and not found.missing


def test_adding_keeps_what_is_pinned_and_pins_new_sources(tmp_path):
    lock = tmp_path / "lock.json"
    write(DOCS, lock)
    moved = [doc("repo:a/b", "README.md", "hello, again"), DOCS[1], DOCS[2], doc("repo:c/d", "SKILL.md", "s")]
    write(moved, lock, keep_pinned=True)
    found = drift(moved, lock)
    assert found.changed == ("repo:a/b",) and not found.added and not found.missing
    assert not drift([*DOCS, moved[-1]], lock)
