"""Who may reach a DeltaGuard server from a browser: Host and Origin allow-lists, and the
headers that keep a page of ours from being framed, sniffed or fed foreign scripts.

A gateway on loopback without keys is still reachable from any web page the operator
opens: a cross-site POST or WebSocket carries the browser's `Origin`, and DNS rebinding
makes a foreign name resolve to 127.0.0.1 (its requests then carry that foreign `Host`).
`HostOriginGuard` wraps an ASGI app (HTTP and the WebSocket handshake alike) and refuses
both before the app sees them:

- `Host` must name one of `allowed_hosts` (any port; `"*"` allows any);
- an `Origin`, when a browser sends one, must be the request's own origin (same host and
  port) or one of `allowed_origins` (`"*"` allows any). Clients that are not browsers
  send no `Origin` and pass.

    app = HostOriginGuard(app, allowed_hosts=("localhost", "127.0.0.1", "::1"))
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})

# The page's own files only: no inline script or style, no framing, no plugins.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def default_hosts(bind: str) -> tuple[str, ...]:
    """The loopback names, and the address the server binds when it names one host."""
    extra = () if bind in WILDCARD_BINDS or bind in LOOPBACK_HOSTS else (bind,)
    return (*LOOPBACK_HOSTS, *extra)


def host_name(authority: str) -> str:
    """`host[:port]` (IPv6 in brackets) -> the lower-case host, without the port."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1 : authority.find("]")] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


def _authority(origin: str) -> str | None:
    """`scheme://host[:port]` -> `host[:port]`, None for an opaque or unparsable origin."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc.lower()


class HostOriginGuard:
    """ASGI middleware: refuse a request whose `Host` or `Origin` is not allowed (403)."""

    def __init__(
        self, app: ASGIApp, allowed_hosts: Iterable[str] = LOOPBACK_HOSTS, allowed_origins: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.hosts = frozenset(h.lower().strip("[]") for h in allowed_hosts)
        self.origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)

    def refusal(self, headers: dict[str, str]) -> tuple[str, str] | None:
        """(code, message) when the request must be refused, else None."""
        host = headers.get("host", "")
        if "*" not in self.hosts and host_name(host) not in self.hosts:
            return "host_not_allowed", f"Host {host[:100]!r} is not among the allowed hosts"
        origin = headers.get("origin")
        if origin is None or "*" in self.origins or origin.lower().rstrip("/") in self.origins:
            return None
        if _authority(origin) != host.strip().lower():
            return "origin_not_allowed", f"Origin {origin[:100]!r} is not this server's nor an allowed one"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refused = self.refusal(headers)
        if refused is None:
            await self.app(scope, receive, send)
            return
        code, message = refused
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": code})  # before accept: 403
            return
        body = json.dumps({"error": {"type": "invalid_request_error", "code": code, "message": message}})
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})
