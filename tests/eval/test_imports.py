"""The evaluations read the training library, never a recipe's internals: every `training`
import of a module in eval/ is of `training.lib` or `training.corpus`, and the library
itself imports no recipe."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALLOWED = ("training.lib", "training.corpus")


def training_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a `training` module, wherever it is (function
    bodies included); `from training import x` counts as importing `training.x`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "training"]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "training":
                out += [(node.lineno, f"training.{a.name}") for a in node.names]
            elif node.module.split(".")[0] == "training":
                out.append((node.lineno, node.module))
    return out


def recipe_imports(source: str) -> list[tuple[int, str]]:
    """The imports of `source` that reach a recipe: anything under `training` outside
    training.lib and training.corpus."""
    return [
        (line, module)
        for line, module in training_imports(source)
        if not any(module == a or module.startswith(a + ".") for a in ALLOWED)
    ]


@pytest.mark.parametrize(
    "path",
    [*sorted((REPO / "eval").glob("*.py")), *sorted((REPO / "training" / "lib").glob("*.py"))],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_imports_no_recipe(path):
    found = recipe_imports(path.read_text())
    assert not found, f"{path.relative_to(REPO)} imports recipe internals: {found}"


def test_the_check_finds_every_form_of_recipe_import():
    source = (
        "from training import train_detector as recipe\n"
        "import training.train_lexical\n"
        "def f():\n"
        "    from training.train_harm import fit\n"
        "from training.lib.detector_rule import score_rows\n"
        "from training.corpus import load_all\n"
        "from training import lib\n"
    )
    assert recipe_imports(source) == [
        (1, "training.train_detector"),
        (2, "training.train_lexical"),
        (4, "training.train_harm"),
    ]


def conftest_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a pytest conftest module."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if "conftest" in a.name.split(".")]
        elif isinstance(node, ast.ImportFrom) and node.module and "conftest" in node.module.split("."):
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("path", sorted((REPO / "eval").glob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_evaluations_import_no_test_fixtures(path):
    """What an evaluation shares with the tests lives in the package (or tests/support), not
    in a conftest, which pytest owns."""
    found = conftest_imports(path.read_text())
    assert not found, f"{path.relative_to(REPO)} imports a conftest: {found}"


def test_the_check_finds_a_conftest_import():
    source = "from tests.pipeline.gateway.conftest import gateway_thread\nimport tests.conftest\n"
    assert conftest_imports(source) == [(1, "tests.pipeline.gateway.conftest"), (2, "tests.conftest")]
    assert conftest_imports("from deltaguard.tools.gateway_thread import gateway_thread\n") == []
