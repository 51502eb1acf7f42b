"""The layering rule of `deltaguard.LAYERS`: every import in the package points down."""

from __future__ import annotations

import ast
from pathlib import Path

import deltaguard

REPO = Path(__file__).resolve().parents[1]
# Where each part of the package lives in the repository (pyproject.toml's package-dir).
SOURCES = {"": REPO / "pipeline", "classifiers": REPO / "classifiers", "models": REPO / "models"}


def name_of(module: str) -> str:
    """The first name under `deltaguard` (`deltaguard.state.store` -> "state"); "" for the
    package's own __init__."""
    parts = module.split(".")
    assert parts[0] == "deltaguard", module
    return parts[1] if len(parts) > 1 else ""


def layer_of(module: str) -> int:
    """The layer of a `deltaguard...` module name (`deltaguard.state.store` -> state's)."""
    name = name_of(module)
    if not name:
        return len(deltaguard.LAYERS)  # the package's own __init__: the public surface, on top
    for index, names in enumerate(deltaguard.LAYERS):
        if name in names:
            return index
    raise AssertionError(f"{module}: {name!r} is in no layer of deltaguard.LAYERS")


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
    """Every import of `source` that points up a layer, or sideways to another name of its
    own layer along no edge of `deltaguard.LAYER_EDGES`."""
    mine, me = layer_of(module), name_of(module)
    found = []
    for line, target in imports_of(source, module, is_package):
        if target == "deltaguard":
            continue
        theirs, them = layer_of(target), name_of(target)
        if theirs > mine:
            found.append(f"{module}:{line} imports {target} (layer {theirs} > {mine})")
        elif theirs == mine and them != me and (me, them) not in deltaguard.LAYER_EDGES:
            found.append(f"{module}:{line} imports {target} (same layer {mine}, not in LAYER_EDGES)")
    return found


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
    assert not found, "imports the layering forbids:\n" + "\n".join(found)


def test_an_upward_import_is_caught():
    # A classifier reaching up into the lanes, at module level or inside a function.
    assert violations("from deltaguard.lanes.stage import SafetyStage\n", "deltaguard.classifiers.lexical")
    assert violations("def f():\n    import deltaguard.gateway.app\n", "deltaguard.state.store")
    assert violations("from ..tools import bench\n", "deltaguard.state.store")
    assert not violations("from deltaguard.items import Item\n", "deltaguard.classifiers.lexical")


def test_a_same_layer_import_the_graph_does_not_need_is_caught():
    # The review page, the tools and the gateway sit side by side: none reaches into another.
    assert violations("from deltaguard.gateway.config import GatewayConfig\n", "deltaguard.review.api")
    assert violations("from deltaguard.review.labels import x\n", "deltaguard.tools.calibrate")
    assert violations("from deltaguard.integrations.litellm import x\n", "deltaguard.gateway.chat")
    assert violations("def f():\n    from ..recording import store\n", "deltaguard.kafka.sink") == []
    # The edges the graph needs, and a name's own modules, pass.
    assert not violations("from deltaguard.gateway.server import serve\n", "deltaguard.tools.demo")
    assert not violations("from deltaguard.parsing import parse_item\n", "deltaguard.transcripts")
    assert not violations("from deltaguard.gateway.wire import new_id\n", "deltaguard.gateway.chat")


def test_every_module_is_in_a_layer():
    for module, _ in package_modules():
        layer_of(module)


def test_the_layers_name_exactly_the_package_top_level_modules_and_folders():
    # One to one: every top-level module and folder in exactly one layer, and no stale names.
    names = [n for layer in deltaguard.LAYERS for n in layer]
    assert len(names) == len(set(names)), names
    present = {name_of(module) for module, _ in package_modules()} - {""}
    assert set(names) == present, (set(names) - present, present - set(names))
    edges = {n for edge in deltaguard.LAYER_EDGES for n in edge}
    assert edges <= present, edges - present
    for importer, imported in deltaguard.LAYER_EDGES:
        assert layer_of(f"deltaguard.{importer}") == layer_of(f"deltaguard.{imported}")


def test_classifier_protocol_imports_nothing_above_items():
    source = (REPO / "classifiers" / "base.py").read_text(encoding="utf-8")
    targets = {t for _, t in imports_of(source, "deltaguard.classifiers.base", False)}
    assert targets <= {"deltaguard.items"}, targets
