from __future__ import annotations

import pytest

from deltaguard.classifiers.registry import load_classifiers
from deltaguard.state.loading import build_scorer


@pytest.fixture(scope="session")
def loaded_classifiers():
    """The default classifiers, loaded once for the whole run (as at startup)."""
    return load_classifiers()


@pytest.fixture(scope="session")
def scorer():
    return build_scorer()
