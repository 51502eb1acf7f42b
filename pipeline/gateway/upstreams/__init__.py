"""The upstream family: the models the gateway forwards a turn to.

Two protocols, each an interface with one double and real implementations:

    responses        the Responses protocol (`Upstream`, `UpstreamCall`, `TERMINAL_EVENTS`)
    chat             the Chat Completions protocol (`ChatUpstream`, `UpstreamRefused`)
    transport        what both HTTP upstreams share: the httpx error boundary, SSE reading
    responses_http   `HttpUpstream`: a Responses endpoint, the whole history, `store: false`
    websocket        `WebSocketUpstream`: per-conversation sockets carrying only new items
    chat_http        `HttpChatUpstream`: a `/chat/completions` endpoint
    simulated        `SimulatedModel`, `SimulatedChatModel`: the embedded models

Usage is read and written by `deltaguard.usage`, the one converter of its shapes.
"""

from __future__ import annotations

from deltaguard.gateway.upstreams.chat import ChatUpstream, UpstreamRefused
from deltaguard.gateway.upstreams.chat_http import HttpChatUpstream
from deltaguard.gateway.upstreams.responses import TERMINAL_EVENTS, Upstream, UpstreamCall
from deltaguard.gateway.upstreams.responses_http import HttpUpstream
from deltaguard.gateway.upstreams.simulated import SimulatedChatModel, SimulatedModel
from deltaguard.gateway.upstreams.websocket import WebSocketUpstream

__all__ = [
    "TERMINAL_EVENTS",
    "ChatUpstream",
    "HttpChatUpstream",
    "HttpUpstream",
    "SimulatedChatModel",
    "SimulatedModel",
    "Upstream",
    "UpstreamCall",
    "UpstreamRefused",
    "WebSocketUpstream",
]
