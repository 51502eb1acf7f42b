"""Tenant API keys: `Authorization: Bearer KEY` to the tenant it belongs to."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from deltaguard.events import DEFAULT_TENANT


def tenant_for(api_keys: Mapping[str, str], headers: Any) -> str | None:
    """The tenant whose API key `headers` carry; None when the key is wrong; `default`
    when no keys are configured.

    Every configured key is compared, in constant time, so timing does not tell
    which key (or how much of one) matched.
    """
    if not api_keys:
        return DEFAULT_TENANT
    scheme, _, token = headers.get("authorization", "").partition(" ")
    offered = token.strip().encode() if scheme.lower() == "bearer" else b""
    found = None
    for key, tenant in api_keys.items():
        if hmac.compare_digest(offered, key.encode()):
            found = tenant
    return found
