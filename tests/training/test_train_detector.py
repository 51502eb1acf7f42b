import pytest

import training.train_detector as train_detector
from training.lib.detector_spec import DEFAULT_BASE, EPOCHS, LAYERS, MINER


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(train_detector, "run_fold", lambda sources, epochs, cap, base, carriers: seen.append(
        ("fold", sources, epochs, base.key, base.layers, carriers)))  # fmt: skip
    monkeypatch.setattr(train_detector, "build", lambda epochs, base, _dir, carriers, miners: seen.append(
        ("build", epochs, base.key, base.layers, carriers, miners)))  # fmt: skip
    return seen


@pytest.mark.parametrize(
    "argv",
    [
        ["--carriers", "--base", "e5", "--layers", "3", "--epochs", "1", "fold", "s-labs"],
        ["fold", "s-labs", "--carriers", "--base", "e5", "--layers", "3", "--epochs", "1"],
        ["--base", "e5", "fold", "s-labs", "--carriers", "--layers", "3", "--epochs", "1"],
    ],
)
def test_the_recipe_options_hold_before_or_after_fold(calls, argv):
    assert train_detector.main(argv) == 0
    assert calls == [("fold", ["s-labs"], 1, "e5", 3, True)]


def test_without_options_the_shipped_recipe_is_built_and_folded(calls):
    train_detector.main([])
    train_detector.main(["fold", "agentdojo,raginject"])
    shipped = (EPOCHS, DEFAULT_BASE, LAYERS, False)
    assert calls == [("build", *shipped, (MINER,)), ("fold", ["agentdojo", "raginject"], *shipped)]


def test_a_later_round_of_mined_windows_is_named_by_releases_of_the_manifest(calls, capsys):
    train_detector.main(["--mined-by", "detector-v2,detector-v3"])
    assert calls == [("build", EPOCHS, DEFAULT_BASE, LAYERS, False, ("detector-v2", "detector-v3"))]
    with pytest.raises(SystemExit):
        train_detector.main(["--mined-by", "detector-v2,detector-v9"])
    err = capsys.readouterr().err
    assert "--mined-by: not a release in" in err and "detector-v9" in err
    with pytest.raises(SystemExit):
        train_detector.main(["--mined-by", "detector-v2,detector-v3", "fold", "s-labs"])
    assert "a fold trains the shipped recipe's rows" in capsys.readouterr().err
    assert len(calls) == 1
