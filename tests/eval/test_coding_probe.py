"""Injections aimed at coding agents and their benign twins (eval/coding_probe.py)."""

from eval.coding_probe import NEW_CARRIERS, NEW_PHRASES, alone, texts
from training.lib.coding_agent import CARRIERS, notes, triple


def test_a_note_alone_is_the_one_its_carrier_holds():
    seed = "probe:new:makefile:3"
    attack, note, _ = notes(seed, NEW_PHRASES)
    clean, injected, twin, _ = triple(NEW_CARRIERS["makefile"], seed, NEW_PHRASES)
    assert attack in injected and note in twin and attack not in clean and note not in clean


def test_the_notes_alone_are_drawn_afresh_and_the_same_every_run():
    drawn = alone(NEW_PHRASES, 30, "new")
    assert drawn == alone(NEW_PHRASES, 30, "new")
    assert len(drawn["injected"]) == len(drawn["benign note"]) == 30
    assert len(set(drawn["injected"])) > 20  # not one phrasing over and over
    assert not set(drawn["injected"]) & set(drawn["benign note"])


def test_every_carrier_gives_each_kind_of_text():
    by_kind = texts({"readme": CARRIERS["readme"]}, None, "seen")
    assert {k: len(v) for k, v in by_kind.items()} == {"injected": 20, "clean": 20, "benign note": 20}
