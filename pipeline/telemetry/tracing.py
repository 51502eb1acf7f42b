"""OpenTelemetry spans per lane, when enabled.

Enabled by `DELTAGUARD_OTEL=1` (or `enable()`), with `opentelemetry-api` installed
(`pip install -e '.[otel]'`); the process's tracer provider and exporter are the
deployment's to configure. Disabled, a span is a no-op context manager, so lanes pay
nothing for it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

_tracer: Any = None


def enable() -> bool:
    """Turn spans on; False when opentelemetry is not installed."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    _tracer = trace.get_tracer("deltaguard")
    return True


def disable() -> None:
    global _tracer
    _tracer = None


@contextlib.contextmanager
def lane_span(lane: str, **attributes: Any) -> Iterator[None]:
    """A span named `deltaguard.<lane>` with the given attributes (ids, tenant, counts)."""
    if _tracer is None:
        yield
        return
    with _tracer.start_as_current_span(
        f"deltaguard.{lane}", attributes={k: v for k, v in attributes.items() if v is not None}
    ):
        yield


if os.environ.get("DELTAGUARD_OTEL") == "1":
    enable()
