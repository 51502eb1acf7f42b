"""`deltaguard review STORE`: the review page on its own, on a loopback address."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import RedirectResponse
from starlette.routing import Route

from deltaguard.access import LOOPBACK_HOSTS, HostOriginGuard
from deltaguard.errors import DeltaGuardError
from deltaguard.recording import TranscriptStore
from deltaguard.review.api import PREFIX, review_routes
from deltaguard.serving import read_deadlines
from deltaguard.state.scoring import Scorer


def check_loopback(host: str) -> None:
    """Refuse to bind anything but a loopback address: the page shows recorded traffic."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise DeltaGuardError(
            f"--host {host!r} is not a loopback address; the review page binds loopback only"
        )


def review_app(
    path: Path | str,
    api_keys: Mapping[str, str] | None = None,
    scorer: Scorer | Callable[[], Scorer] | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
) -> Starlette:
    """The review routes in an app of their own; the store must exist. Requests must name
    one of `allowed_hosts` and come from the page's own origin (DNS rebinding, CSRF)."""
    with TranscriptStore(path).open(create=False):  # a missing or unreadable store fails here
        pass

    async def root(request: object) -> RedirectResponse:
        return RedirectResponse(PREFIX)

    return Starlette(
        routes=[Route("/", root, methods=["GET"]), *review_routes(path, api_keys, scorer)],
        middleware=[Middleware(HostOriginGuard, allowed_hosts=allowed_hosts)],
    )


def serve_review(
    path: Path | str,
    host: str,
    port: int,
    api_keys: Mapping[str, str] | None = None,
    scorer: Scorer | Callable[[], Scorer] | None = None,
    log_level: str = "info",
) -> None:
    """Serve the review page until interrupted."""
    check_loopback(host)
    app = review_app(path, api_keys, scorer, allowed_hosts=(*LOOPBACK_HOSTS, host))
    uvicorn.run(app, host=host, port=port, log_level=log_level, http=read_deadlines(10.0, 60.0))
