"""`/v1/guard/output` bills the usage its caller supplies: only whole counts in range."""

from __future__ import annotations

import time

import httpx
import pytest

from deltaguard.events import BillingEvent
from deltaguard.gateway.config import GatewayConfig
from deltaguard.sinks import MemorySink
from deltaguard.usage import MAX_TOKENS
from tests.pipeline.gateway.conftest import gateway_thread

MESSAGES = [{"role": "user", "content": "what is two plus two?"}]
ANSWER = {"role": "assistant", "content": "four"}


@pytest.fixture(scope="module")
def guard(scorer):
    billing = MemorySink()
    with gateway_thread(GatewayConfig(port=0), scorer, billing_sink=billing) as (base, _):
        yield base, billing


def check_output(base: str, usage, n: int) -> httpx.Response:
    messages = [*MESSAGES, {"role": "user", "content": f"question {n}"}]
    return httpx.post(
        f"{base}/v1/guard/output", json={"messages": messages, "message": ANSWER, "usage": usage}, timeout=30
    )


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -1, "completion_tokens": 3},
        {"input_tokens": 10**30, "output_tokens": 1},
        {"prompt_tokens": "12", "completion_tokens": 3},
        {"prompt_tokens": 12, "completion_tokens": 2.5},
        {"input_tokens": True, "output_tokens": 1},
        {"input_tokens": 4, "output_tokens": 1, "input_tokens_details": {"cached_tokens": -4}},
        {"prompt_tokens": 4, "completion_tokens": 1, "prompt_tokens_details": "lots"},
        {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": MAX_TOKENS + 1},
    ],
)
def test_bad_usage_is_a_specific_400(guard, usage):
    base, _ = guard
    r = check_output(base, usage, 0)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_usage" and r.json()["error"]["param"] == "usage"


def test_good_usage_is_billed_as_given(guard):
    base, billing = guard
    r = check_output(base, {"prompt_tokens": 120, "completion_tokens": 7}, 1)
    assert r.status_code == 200, r.text
    conversation = r.json()["conversation_id"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        mine = [
            e for e in billing.events if isinstance(e, BillingEvent) and e.conversation_id == conversation
        ]
        if mine:
            break
        time.sleep(0.05)
    assert [(e.input_tokens, e.output_tokens) for e in mine] == [(120, 7)]
