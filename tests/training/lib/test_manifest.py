"""The manifest writer of training/lib/manifest.py."""

import json

from training.lib.manifest import update_manifest, write_manifest_entry


def test_an_entry_is_written_in_place_and_every_other_key_is_left_alone(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"models": {"a": {"v": 1}, "b": {"v": 2}}, "note": "kept"}), encoding="utf-8")
    write_manifest_entry({"v": "é"}, "a", tmp_path)
    text = path.read_text(encoding="utf-8")
    # the key keeps its place, non-ASCII is written as is, two-space indent, trailing newline
    assert (
        text
        == json.dumps(
            {"models": {"a": {"v": "é"}, "b": {"v": 2}}, "note": "kept"}, indent=2, ensure_ascii=False
        )
        + "\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary file left


def test_an_edit_may_change_several_keys(tmp_path):
    write_manifest_entry({"v": 1}, "a", tmp_path)  # no manifest yet: one is started

    def rename(models):
        models["a-old"] = models.pop("a")
        models["a"] = {"v": 2}

    update_manifest(rename, tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8")) == {
        "models": {"a-old": {"v": 1}, "a": {"v": 2}}
    }
