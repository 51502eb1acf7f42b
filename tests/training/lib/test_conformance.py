"""training/lib/conformance.py: a recipe's entry stays only if the served classifier conforms."""

import json

import pytest

from deltaguard.artifacts import MANIFEST_NAME
from deltaguard.classifiers import checks
from deltaguard.classifiers.base import Update
from deltaguard.classifiers.secrets import SecretsClassifier
from training.lib.conformance import publish


class _Forgetful(SecretsClassifier):
    def update(self, state, items):
        upd = super().update(state, items)
        batch = {**upd.state, "batch": len(items)}
        return Update(state=batch, item_scores=upd.item_scores, scores=upd.scores, tokens=upd.tokens)


def _write(models, entry):
    path = models / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["models"]["new"] = entry
    path.write_text(json.dumps(manifest))


def test_a_conforming_classifier_keeps_its_entry(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"models": {}}))
    publish(tmp_path, lambda: _write(tmp_path, {"version": "1"}), SecretsClassifier)
    assert json.loads((tmp_path / MANIFEST_NAME).read_text())["models"] == {"new": {"version": "1"}}


def test_a_broken_classifier_puts_the_manifest_back(tmp_path):
    before = json.dumps({"models": {"old": {"version": "1"}}})
    (tmp_path / MANIFEST_NAME).write_text(before)
    with pytest.raises(checks.ConformanceError, match="secrets: "):
        publish(tmp_path, lambda: _write(tmp_path, {"version": "2"}), _Forgetful)
    assert (tmp_path / MANIFEST_NAME).read_text() == before


def test_every_classifier_served_is_checked(tmp_path):
    before = json.dumps({"models": {}})
    (tmp_path / MANIFEST_NAME).write_text(before)
    with pytest.raises(checks.ConformanceError, match="secrets: "):
        publish(
            tmp_path, lambda: _write(tmp_path, {"version": "2"}), lambda: [SecretsClassifier(), _Forgetful()]
        )
    assert (tmp_path / MANIFEST_NAME).read_text() == before


def test_publish_entry_writes_through_the_manifest_writer_and_checks_the_views(tmp_path):
    from training.lib.conformance import publish_entry

    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"models": {"old": {"version": "1"}}}))
    publish_entry({"version": "2"}, "new", ("secrets", "pii"), tmp_path)
    assert (tmp_path / MANIFEST_NAME).read_text() == json.dumps(
        {"models": {"old": {"version": "1"}, "new": {"version": "2"}}}, indent=2
    ) + "\n"
