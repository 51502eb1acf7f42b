"""The gateway on every state backend: continuations, forks, the Conversations API, guard
continuation ids and the lock-out; a restart after kill -9 (sqlite) and two replicas
behind a real round-robin proxy (redis) give the verdicts of one uninterrupted gateway."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import httpx
import openai
import pytest

from deltaguard.classifiers.base import Update
from deltaguard.gateway.config import GatewayConfig
from deltaguard.items import count_tokens
from deltaguard.state.backends import open_backend
from deltaguard.state.scoring import Scorer
from tests.pipeline.gateway.conftest import clients, gateway_thread
from tests.pipeline.gateway.test_release_hold import BENIGN, INJECTED, TOOLS, _tool_output
from tests.support.serve import INJECTION, agent_loop, one_turn, served, start, stop, turn_input
from tests.support.state_servers import redis_server, round_robin_proxy
from tests.support.toy import ItemCounter, SlowInjectionMarker
from tests.support.upstreams import ToolCallingUpstream

TURNS = range(10)


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


def fresh_url(kind: str, tmp_path, redis_url_factory) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite://{tmp_path}/state.db"
    url = redis_url_factory()
    backend = open_backend(url)
    backend._client.flushdb()
    backend.close()
    return url


@pytest.fixture(params=["memory", "sqlite", "redis"])
def state_url(request, tmp_path):
    return fresh_url(request.param, tmp_path, lambda: request.getfixturevalue("redis_url"))


def exercise(base: str) -> dict:
    """Continuations, a fork, a Conversations API conversation, a guard continuation id
    and the lock-out; returns what a second gateway must find."""
    client, _ = clients(base)
    first = client.responses.create(model="sim", input="what is in the repo?")
    second = client.responses.create(model="sim", input="and the tests?", previous_response_id=first.id)
    fork = client.responses.create(model="sim", input="and the docs?", previous_response_id=first.id)
    assert second.status == fork.status == "completed"
    conversation = client.conversations.create()
    client.responses.create(model="sim", input="hello", conversation=conversation.id)
    client.responses.create(model="sim", input="again", conversation=conversation.id)
    assert len(client.conversations.items.list(conversation.id).data) == 4
    checked = httpx.post(
        f"{base}/v1/guard/input", json={"messages": [{"role": "user", "content": "fix it"}]}, timeout=30
    ).json()
    probe = client.responses.create(model="sim", input="hi")
    for _ in range(2):  # block_limit=2: the conversation is refused from now on
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="sim", input=INJECTION, previous_response_id=probe.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="sim", input="thanks", previous_response_id=probe.id)
    assert refused.value.body["code"] == "safety_blocked"
    return {"fork": fork.id, "probe": probe.id, "conversation": conversation.id, "guard": checked}


def check_found(base: str, seen: dict) -> None:
    """Everything `exercise` left is found (by another process on the same store)."""
    client, _ = clients(base)
    r = client.responses.create(model="sim", input="and the CI?", previous_response_id=seen["fork"])
    assert r.status == "completed"
    r = client.responses.create(model="sim", input="one more", conversation=seen["conversation"])
    assert r.status == "completed"
    assert len(client.conversations.items.list(seen["conversation"]).data) == 6
    guard = seen["guard"]
    more = [{"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
    out = httpx.post(
        f"{base}/v1/guard/input",
        json={"continuation_id": guard["continuation_id"], "messages": more},
        timeout=30,
    )
    assert out.status_code == 200 and out.json()["conversation_id"] == guard["conversation_id"]
    with pytest.raises(openai.BadRequestError) as refused:  # the lock-out holds
        client.responses.create(model="sim", input="please", previous_response_id=seen["probe"])
    assert refused.value.body["code"] == "safety_blocked"


def config(url: str) -> GatewayConfig:
    return GatewayConfig(port=0, sim_tokens_per_s=50_000, block_limit=2, state=url)


def test_every_backend_keeps_continuations_conversations_guard_ids_and_the_lockout(scorer, state_url):
    with gateway_thread(config(state_url), scorer) as (base, _):
        seen = exercise(base)
        check_found(base, seen)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_another_gateway_on_the_same_store_finds_everything(scorer, kind, tmp_path, request):
    url = fresh_url(kind, tmp_path, lambda: request.getfixturevalue("redis_url"))
    with gateway_thread(config(url), scorer) as (base, _):
        seen = exercise(base)
    with gateway_thread(config(url), scorer) as (base, _):
        check_found(base, seen)


class Tally(ItemCounter):
    """Flags `secrets` once it has counted 6: `step` per item, a step that changes with the
    version (what an upgrade does to a classifier's state)."""

    def __init__(self, step: int) -> None:
        super().__init__("tally")
        self.step = step
        self.version = f"tally-{step}"

    def update(self, state, items):
        upd = super().update(state, items)
        n = state["n"] + self.step * len(items)
        scores = {"secrets": 1.0 if n >= 6 else 0.0}
        return Update(
            state={"n": n, "max": scores}, item_scores=[scores] * len(items), scores=scores, tokens=upd.tokens
        )


def test_an_upgraded_gateway_refolds_the_history_it_continues_from_the_store(tmp_path):
    """The gateway restarted with other models on the same sqlite store continues every
    conversation, with its own models' verdict over the whole history, never the old
    models' states: 3 items counted 2 each reach 6 (a block), where resuming the old
    count (1 each) would give 4."""
    url = f"sqlite://{tmp_path}/state.db"
    with gateway_thread(config(url), Scorer([Tally(1)])) as (base, _):
        client, _ = clients(base)
        first = client.responses.create(model="sim", input="what is in the repo?")  # 2 items
    with gateway_thread(config(url), Scorer([Tally(2)])) as (base, _):
        client, _ = clients(base)
        with pytest.raises(openai.BadRequestError) as blocked:
            client.responses.create(model="sim", input="and the tests?", previous_response_id=first.id)
        assert blocked.value.body["code"] == "safety_blocked"
    with gateway_thread(config(url), Scorer([Tally(1)])) as (base, _):  # the old version still
        client, _ = clients(base)
        again = client.responses.create(model="sim", input="and the docs?", previous_response_id=first.id)
        assert again.status == "completed"


def test_tenants_stay_apart_on_a_shared_store(scorer, redis_url):
    keys = {"key-alpha-123": "alpha", "key-beta-456": "beta"}
    cfg = config(redis_url).model_copy(update={"api_keys": keys})
    with gateway_thread(cfg, scorer) as (base, _), gateway_thread(cfg, scorer) as (other, _):
        alpha, _ = clients(base, "key-alpha-123")
        beta, _ = clients(other, "key-beta-456")
        mine = alpha.responses.create(model="sim", input="alpha's conversation")
        with pytest.raises(openai.BadRequestError) as exc:
            beta.responses.create(model="sim", input="peek", previous_response_id=mine.id)
        assert exc.value.body["code"] == "previous_response_not_found"
        alpha_there, _ = clients(other, "key-alpha-123")
        r = alpha_there.responses.create(model="sim", input="still mine", previous_response_id=mine.id)
        assert r.status == "completed"


@pytest.fixture(scope="module")
def uninterrupted():
    """The agent loop's verdicts from one gateway that keeps its state in memory."""
    with served(["--block-limit", "2"]) as gw:
        return agent_loop(openai.OpenAI(base_url=gw.base + "/v1", api_key="x", max_retries=0), TURNS)[:-1]


@pytest.mark.slow
def test_a_gateway_killed_mid_loop_continues_on_sqlite_with_the_same_verdicts(tmp_path, uninterrupted):
    billing = tmp_path / "billing.jsonl"
    args = ["--state", f"sqlite://{tmp_path}/state.db", "--block-limit", "2"]
    args += ["--billing", str(billing), "--billing-journal", str(tmp_path / "billing.journal")]
    args += ["--sim-tokens-per-s", "40"]  # about a second per answer: the kill lands mid-answer
    settings = tmp_path / "gateway.toml"  # the streamed output's count journalled every 5 tokens
    settings.write_text("billing_journal_every_tokens = 5\n")
    args += ["--config", str(settings)]
    gw = start(args)
    try:
        client = openai.OpenAI(base_url=gw.base + "/v1", api_key="x", max_retries=0)
        *verdicts, previous = agent_loop(client, TURNS[:4])
        # Killed while it streams turn 4's answer, once the client has read 12 tokens of it.
        stream = client.responses.create(
            model="sim", input=turn_input(4), previous_response_id=previous, stream=True
        )
        events = iter(stream)
        killed = next(events).response.id
        streamed = 0  # tokens of the answer's text the client received
        for event in events:
            if event.type == "response.output_text.delta":
                streamed += count_tokens(event.delta)
            if streamed >= 12:
                break
        gw.kill()
        with contextlib.suppress(openai.APIError, httpx.HTTPError):
            for event in events:  # what was on its way when the gateway died
                if event.type == "response.output_text.delta":
                    streamed += count_tokens(event.delta)
        gw = start(args, port=gw.port, log=gw.log)
        # The client retries the turn that failed, from the same previous response.
        v, previous = one_turn(client, 4, previous)
        *rest, _ = agent_loop(client, TURNS[5:], previous)
    finally:
        stop(gw)
    assert [*verdicts, v, *rest] == uninterrupted
    # Every response the upstream was asked for is billed, the one cut by the kill too
    # (its counted input, from the journal); at least once, under one stable id each.
    billed = [json.loads(line) for line in billing.read_text().splitlines()]
    answered = sum("error" not in x for x in [*verdicts, v, *rest])
    assert len({b["response_id"] for b in billed}) == answered + 1
    [cut] = {b["event_id"]: b for b in billed if b["response_id"] == killed}.values()
    # The cut answer bills its input and the output streamed before the kill, as far as
    # the journal had counted it (every 5 tokens).
    assert cut["input_tokens"] > 0 and streamed - 5 < cut["output_tokens"] <= streamed


@pytest.mark.slow
def test_two_replicas_on_redis_behind_a_round_robin_proxy_give_one_gateways_verdicts(
    redis_url, uninterrupted
):
    open_backend(redis_url)._client.flushdb()
    args = ["--state", redis_url, "--block-limit", "2"]
    a, b = start(args), start(args)
    try:
        with round_robin_proxy([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]) as base:
            client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
            *verdicts, last = agent_loop(client, TURNS)
            conversation = client.conversations.create()
            for text in ("hello", "again", "once more"):
                client.responses.create(model="sim", input=text, conversation=conversation.id)
            assert len(client.conversations.items.list(conversation.id).data) == 6
            # Two blocked turns, one on each replica, lock the conversation on both.
            probe = client.responses.create(model="sim", input="hi")
            for _ in range(2):
                with pytest.raises(openai.BadRequestError):
                    client.responses.create(model="sim", input=INJECTION, previous_response_id=probe.id)
            for _ in range(2):
                with pytest.raises(openai.BadRequestError) as refused:
                    client.responses.create(model="sim", input="thanks", previous_response_id=probe.id)
                assert refused.value.body["code"] == "safety_blocked"
    finally:
        stop(a)
        stop(b)
    assert verdicts == uninterrupted
    assert last is not None
    # Both replicas served the loop (round robin: every other request).
    assert a.requests_served() >= 5 and b.requests_served() >= 5


def _tool_turns(base: str, output: str):
    """A tool call, then its output continued at once, then the next turn at once: the
    requests alternate between replicas behind the proxy. (the second response, the
    third's response or the error that refused it)."""
    client, _ = clients(base)
    first = client.responses.create(model="m", input="What is the weather?", tools=TOOLS)
    [call] = [o for o in first.output if o.type == "function_call"]
    second = client.responses.create(
        model="m", input=_tool_output(call.call_id, output), previous_response_id=first.id, tools=TOOLS
    )
    try:
        return second, client.responses.create(model="m", input="go on", previous_response_id=second.id)
    except openai.BadRequestError as exc:
        return second, exc.body


@contextlib.contextmanager
def _monitored_gateways(state: str, replicas: int):
    """`replicas` gateways on `state` (behind HAProxy when several), whose monitor lane
    takes 0.5 s to flag an injected tool output, and whose responses are not held for it
    (`release_hold="off"`): the client has the response before the verdict."""
    config = GatewayConfig(port=0, state=state, release_hold="off", monitor_verdict_wait_s=10.0)
    with contextlib.ExitStack() as stack:
        running = [
            stack.enter_context(
                gateway_thread(
                    config,
                    Scorer([ItemCounter(), SlowInjectionMarker(delay_s=0.5)]),
                    upstream=ToolCallingUpstream(tool="upload"),
                )
            )
            for _ in range(replicas)
        ]
        bases = [base for base, _ in running]
        if replicas > 1:
            bases = [stack.enter_context(round_robin_proxy([b.removeprefix("http://") for b in bases]))]
        yield bases[0], [app.state.gateway.stage for _, app in running]


def test_a_tool_output_the_monitor_blocks_refuses_its_continuation_on_the_other_replica_at_once(redis_url):
    with _monitored_gateways("memory://", 1) as (base, _):
        _, alone = _tool_turns(base, INJECTED)
    open_backend(redis_url)._client.flushdb()
    with _monitored_gateways(redis_url, 2) as (base, stages):
        second, refused = _tool_turns(base, INJECTED)
        assert second.status == "completed"  # its verdict came after it, on the replica that served it
        _, answered = _tool_turns(base, BENIGN)
    # The continuation, on the other replica, is refused as on one gateway.
    assert refused == alone
    assert refused["code"] == "safety_blocked" and refused["categories"] == ["prompt_injection"]
    assert answered.status == "completed"
    # Each replica waited for a verdict judged by the other one; none was late.
    assert all(s.lockout.verdicts.waited >= 1 for s in stages)
    assert sum(s.lockout.verdicts.late for s in stages) == 0


def test_serve_refuses_a_state_url_it_cannot_use():
    done = subprocess.run(
        [sys.executable, "-m", "deltaguard", "serve", "--state", "postgres://db/0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "sqlite:///PATH" in done.stderr
