"""The layering rule of `deltaguard.LAYERS`: every import in the package points down."""

from __future__ import annotations

import ast
from pathlib import Path

import deltaguard

REPO = Path(__file__).resolve().parents[1]
# Where each part of the package lives in the repository (pyproject.toml's package-dir).
SOURCES = {"": REPO / "pipeline", "classifiers": REPO / "classifiers", "models": REPO / "models"}


def layer_of(module: str) -> int:
    """The layer of a `deltaguard...` module name (`deltaguard.state.store` -> state's)."""
    parts = module.split(".")
    assert parts[0] == "deltaguard", module
    if len(parts) == 1:
        return len(deltaguard.LAYERS)  # the package's own __init__: the public surface, on top
    for index, names in enumerate(deltaguard.LAYERS):
        if parts[1] in names:
            return index
    raise AssertionError(f"{module}: {parts[1]!r} is in no layer of deltaguard.LAYERS")


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported module) for every deltaguard import in `source`, wherever it is
    (function bodies and TYPE_CHECKING blocks included)."""
    out = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "deltaguard"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.split(".")[0] == "deltaguard":
                out.append((node.lineno, name))
    return out


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    mine = layer_of(module)
    return [
        f"{module}:{line} imports {target} (layer {layer_of(target)} > {mine})"
        for line, target in imports_of(source, module, is_package)
        if target != "deltaguard" and layer_of(target) > mine
    ]


def package_modules() -> list[tuple[str, Path]]:
    out = []
    for prefix, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out.append((".".join(["deltaguard", *filter(None, [prefix]), *rel]), path))
    return out


def test_every_import_points_down():
    found = []
    for module, path in package_modules():
        if module == "deltaguard":
            continue
        found += violations(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
    assert not found, "upward imports:\n" + "\n".join(found)


def test_an_upward_import_is_caught():
    # A classifier reaching up into the lanes, at module level or inside a function.
    assert violations("from deltaguard.lanes.stage import SafetyStage\n", "deltaguard.classifiers.lexical")
    assert violations("def f():\n    import deltaguard.gateway.app\n", "deltaguard.state.store")
    assert violations("from ..tools import bench\n", "deltaguard.state.store")
    assert not violations("from deltaguard.items import Item\n", "deltaguard.classifiers.lexical")


def test_every_module_is_in_a_layer():
    for module, _ in package_modules():
        layer_of(module)


def test_classifier_protocol_imports_nothing_above_items():
    source = (REPO / "classifiers" / "base.py").read_text(encoding="utf-8")
    targets = {t for _, t in imports_of(source, "deltaguard.classifiers.base", False)}
    assert targets <= {"deltaguard.items"}, targets
