import pytest

import training.train_detector as train_detector
from training.lib.detector_spec import DEFAULT_BASE, EPOCHS, LAYERS


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(train_detector, "run_fold", lambda sources, epochs, cap, base, carriers: seen.append(
        ("fold", sources, epochs, base.key, base.layers, carriers)))  # fmt: skip
    monkeypatch.setattr(train_detector, "build", lambda epochs, base, models_dir, carriers: seen.append(
        ("build", epochs, base.key, base.layers, carriers)))  # fmt: skip
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
    assert calls == [("build", *shipped), ("fold", ["agentdojo", "raginject"], *shipped)]
