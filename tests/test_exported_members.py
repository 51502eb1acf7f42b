"""The public surface of `deltaguard`: what `__all__` lists, exactly."""

from __future__ import annotations

import deltaguard


def test_all_exports():
    exported = {name for name in dir(deltaguard) if not name.startswith("_") or name == "__version__"}
    exported -= {"annotations", "LAYERS", "LAYER_EDGES"}
    modules = {name for name in exported if type(getattr(deltaguard, name)).__name__ == "module"}
    assert set(deltaguard.__all__) == exported - modules


def test_all_names_resolve():
    for name in deltaguard.__all__:
        assert getattr(deltaguard, name) is not None, name
