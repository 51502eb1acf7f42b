"""The reasoning test upstream, driven by the official `openai` SDK over JSON, SSE and WebSocket.

These show that what the integration tests stand on behaves as the hosted Responses API
does: the SDK parses every event and item it emits, WebSocket continuations carry only
new items, state is connection-scoped, `generate: false` primes it, and reasoning items
round-trip verifiably.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import (
    ResponseCustomToolCall,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
)

from tests.support.reasoning_upstream import (
    async_running_reasoning_upstream,
    custom_tool_call,
    function_call,
    message,
    reasoning,
    running_reasoning_upstream,
    url_citation,
)

TEXT = "Use pathlib for paths, as the Python docs on pathlib recommend."
CITE = url_citation(
    TEXT, "Python docs on pathlib", "https://docs.python.org/3/library/pathlib.html", "pathlib"
)
PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"
TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Runs a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        "strict": False,
    },
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch."},
]
ENCRYPTED = ["reasoning.encrypted_content"]
# The SDK's sync WebSocket client sends through the websockets library in a way that
# library deprecates; nothing here can change that.
SDK_WS_DEPRECATION = "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"
pytestmark = pytest.mark.filterwarnings(SDK_WS_DEPRECATION)


def every_item_policy(history, body):
    """One response with every item type the upstream produces."""
    return [
        reasoning("First I look at the layout.", "Then I patch it.", reasoning_tokens=120),
        message(TEXT, [CITE], phase="commentary"),
        function_call("exec_command", {"cmd": "ls"}),
        custom_tool_call("apply_patch", PATCH),
    ]


def reply_policy(history, body):
    return [reasoning(f"Reading {len(history)} items."), message(f"I have seen {len(history)} items.")]


@pytest.fixture()
def every_item():
    with running_reasoning_upstream(policy=every_item_policy) as running:
        yield running


def sdk(base: str) -> OpenAI:
    return OpenAI(base_url=base, api_key="x", max_retries=0)


def check_every_item(output) -> None:
    rs, msg, fc, ctc = output
    assert isinstance(rs, ResponseReasoningItem) and rs.id.startswith("rs_")
    assert [s.text for s in rs.summary] == ["First I look at the layout.", "Then I patch it."]
    assert isinstance(msg, ResponseOutputMessage) and msg.content[0].text == TEXT
    annotation = msg.content[0].annotations[0]
    assert annotation.type == "url_citation" and TEXT[annotation.start_index : annotation.end_index] == (
        "Python docs on pathlib"
    )
    assert (
        isinstance(fc, ResponseFunctionToolCall)
        and fc.name == "exec_command"
        and fc.arguments == '{"cmd": "ls"}'
    )
    assert isinstance(ctc, ResponseCustomToolCall) and ctc.id.startswith("ctc_") and ctc.input == PATCH
    assert fc.call_id.startswith("call_") and ctc.call_id.startswith("call_") and fc.call_id != ctc.call_id


def test_json_response_echoes_the_request_and_reports_realistic_usage(every_item):
    base, recorder = every_item
    fields = {
        "instructions": "Be terse.",
        "tools": TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "high", "summary": "auto"},
        "text": {"verbosity": "low"},
        "service_tier": "priority",
        "prompt_cache_key": "session-1",
        "max_output_tokens": 4096,
        "user": "user-1",
        "safety_identifier": "safe-1",
        "store": False,
        "truncation": "auto",
        "metadata": {"run": "7"},
        "include": ENCRYPTED,
    }
    r = sdk(base).responses.create(model="gpt-test", input="tidy the paths", **fields)
    check_every_item(r.output)
    assert r.output[0].encrypted_content and r.output[1].phase == "commentary"
    assert r.model == "gpt-test" and r.status == "completed" and r.id.startswith("resp_")
    dumped = r.model_dump(mode="json", exclude_none=True)
    for key, value in fields.items():
        if key == "text":
            assert dumped["text"]["verbosity"] == "low" and dumped["text"]["format"] == {"type": "text"}
        elif key == "tools":
            assert [t["name"] for t in dumped["tools"]] == ["exec_command", "apply_patch"]
        else:
            assert dumped[key] == value, key
    usage = r.usage
    assert usage.input_tokens > 50 and usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 120
    assert usage.output_tokens > 120 and usage.total_tokens == usage.input_tokens + usage.output_tokens

    # The same prompt again: its prefix is in the prompt cache (all but the last item).
    again = sdk(base).responses.create(model="gpt-test", input="tidy the paths", **fields)
    assert 0 < again.usage.input_tokens_details.cached_tokens < again.usage.input_tokens
    first = recorder.requests[0]
    assert first.transport == "http" and first.input_items == 1 and first.raw_bytes > 500
    assert first.body["prompt_cache_key"] == "session-1" and first.usage == r.usage.model_dump(
        exclude_none=True
    )


def test_sse_events_come_in_the_documented_order_and_the_sdk_parses_each(every_item):
    base, recorder = every_item
    with sdk(base).responses.stream(model="m", input="go", tools=TOOLS, include=ENCRYPTED) as stream:
        events = list(stream)
        final = stream.get_final_response()
    check_every_item(final.output)
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # Every event is one of the SDK's typed events (none fell back to an untyped model).
    untyped = [
        e.type
        for e in events
        if not type(e).__module__.startswith("openai.") or "Event" not in type(e).__name__
    ]
    assert not untyped
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert collapsed == [
        "response.created",
        "response.in_progress",
        # reasoning, two summary parts
        "response.output_item.added",
        *[
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
        ]
        * 2,
        "response.output_item.done",
        # message with a citation
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.annotation.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        # function call
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        # freeform tool call
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    for kind in (
        "response.reasoning_summary_text.delta",
        "response.output_text.delta",
        "response.custom_tool_call_input.delta",
    ):
        assert kinds.count(kind) >= 3, kind  # streamed in several deltas
    deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    assert deltas == PATCH
    added = next(e for e in events if e.type == "response.output_text.annotation.added")
    assert added.annotation.url == CITE["url"] and added.annotation_index == 0
    assert recorder.requests[0].transport == "sse"
    assert [e["type"] for e in recorder.events[final.id]] == kinds


def test_http_previous_response_id_needs_a_stored_response():
    with running_reasoning_upstream(policy=reply_policy) as (base, recorder):
        client = sdk(base)
        unstored = client.responses.create(model="m", input="hello", store=False)
        with pytest.raises(openai.BadRequestError) as exc:
            client.responses.create(model="m", input="again", previous_response_id=unstored.id)
        assert exc.value.body["code"] == "previous_response_not_found"

        stored = client.responses.create(model="m", input="hello")
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="m", input="again", previous_response_id=stored.id, store=False)
        follow = client.responses.create(model="m", input="again", previous_response_id=stored.id)
        assert follow.output_text == "I have seen 4 items."  # hello, reasoning, reply, again
        assert follow.usage.input_tokens_details.cached_tokens > 0
        refused = "previous_response_not_found"
        assert [r.error for r in recorder.requests] == [None, refused, None, refused, None]
        assert recorder.requests[-1].history_items == 4 and recorder.requests[-1].input_items == 1


def test_websocket_continuations_carry_only_new_items():
    with running_reasoning_upstream() as (base, recorder), sdk(base).responses.connect(max_retries=0) as conn:
        create = {
            "model": "m",
            "tools": TOOLS,
            "store": False,
            "include": ENCRYPTED,
            "instructions": "x" * 4000,
        }
        conn.send({"type": "response.create", **create, "input": "fix the failing test"})
        response = recv_done(conn).response
        sizes, cached = [], []
        for _ in range(2):  # the default policy calls the first tool twice, then answers
            call = next(o for o in response.output if o.type == "function_call")
            new = [{"type": "function_call_output", "call_id": call.call_id, "output": "ok " * 200}]
            conn.send(
                {"type": "response.create", **create, "input": new, "previous_response_id": response.id}
            )
            response = recv_done(conn).response
            cached.append(response.usage.input_tokens_details.cached_tokens)
        assert response.output[-1].type == "message"
        turns = recorder.by_transport("ws")
        assert [t.input_items for t in turns] == [1, 1, 1]
        assert [t.history_items for t in turns] == [1, 4, 7]  # + reasoning, call and output per turn
        sizes = [t.raw_bytes for t in turns[1:]]
        assert abs(sizes[0] - sizes[1]) < 100  # flat: the history is never resent
        # The chain is cached: each continuation pays only for its new item.
        assert cached[0] >= turns[0].usage["input_tokens"] and cached[1] > cached[0]
        checks = recorder.reasoning_checks
        assert checks and all(c.ok and c.via == "previous_response_id" for c in checks)


def test_websocket_unknown_previous_response_is_an_error_and_the_socket_stays_open():
    with running_reasoning_upstream(policy=reply_policy) as (base, recorder):
        client = sdk(base)
        with client.responses.connect(max_retries=0) as first:
            first.send({"type": "response.create", "model": "m", "input": "hi", "store": False})
            elsewhere = recv_done(first).response.id
        with client.responses.connect(max_retries=0) as conn:
            # A response of another socket, not stored: this socket does not hold it.
            for prev in ("resp_nope", elsewhere):
                conn.send(
                    {"type": "response.create", "model": "m", "input": "x", "previous_response_id": prev}
                )
                error = recv_done(conn)
                assert error.type == "error" and error.error.code == "previous_response_not_found"
                assert error.error.param == "previous_response_id" and error.status == 400
            conn.send({"type": "response.create", "model": "m", "input": "still here?", "store": False})
            assert recv_done(conn).type == "response.completed"
        assert [r.error for r in recorder.requests] == [
            None,
            "previous_response_not_found",
            "previous_response_not_found",
            None,
        ]


def test_generate_false_primes_the_socket_without_output():
    with running_reasoning_upstream(policy=reply_policy) as (base, recorder):
        with sdk(base).responses.connect(max_retries=0) as conn:
            prefix = {"model": "m", "tools": TOOLS, "store": False, "instructions": "Be helpful. " * 300}
            conn.send({"type": "response.create", **prefix, "input": "context", "generate": False})
            warm = recv_done(conn).response
            assert warm.output == [] and warm.usage.output_tokens == 0 and warm.status == "completed"
            conn.send(
                {"type": "response.create", **prefix, "input": "question", "previous_response_id": warm.id}
            )
            answer = recv_done(conn).response
        assert answer.output_text == "I have seen 2 items."
        assert answer.usage.input_tokens_details.cached_tokens >= warm.usage.input_tokens
        assert [r.generate for r in recorder.requests] == [False, True]
        assert len(recorder.generated) == 1


def test_reasoning_round_trip_is_verified():
    with running_reasoning_upstream(policy=reply_policy) as (base, recorder):
        client = sdk(base)
        first = client.responses.create(model="m", input="hi", store=False, include=ENCRYPTED)
        items = [o.model_dump(exclude_none=True) for o in first.output]
        history = [{"role": "user", "content": "hi"}, *items, {"role": "user", "content": "more"}]
        client.responses.create(model="m", input=history, store=False, include=ENCRYPTED)
        assert [(c.item_id, c.via, c.ok) for c in recorder.reasoning_checks] == [
            (first.output[0].id, "input", True)
        ]
        assert recorder.reasoning_round_tripped()

        altered = {**items[0], "summary": [{"type": "summary_text", "text": "something else"}]}
        forged = {**items[0], "encrypted_content": "gAAAAA" + "A" * 80}
        unsealed = {k: v for k, v in items[0].items() if k != "encrypted_content"}
        for bad, reason in ((altered, "summary changed"), (forged, "not sealed"), (unsealed, "no encrypted")):
            with pytest.raises(openai.BadRequestError) as exc:
                client.responses.create(model="m", input=[bad, {"role": "user", "content": "x"}], store=False)
            assert exc.value.body["code"] == "invalid_encrypted_content"
            assert reason in recorder.reasoning_checks[-1].reason and not recorder.reasoning_checks[-1].ok
        assert not recorder.reasoning_round_tripped()


def test_the_default_policy_acts_like_a_coding_agent():
    with running_reasoning_upstream() as (base, _):
        client = sdk(base)
        history: list = [{"role": "user", "content": "fix it"}]
        kinds = []
        for _ in range(4):
            r = client.responses.create(
                model="m", input=history, tools=TOOLS[::-1], store=False, include=ENCRYPTED
            )
            kinds.append([o.type for o in r.output])
            history += [o.model_dump(exclude_none=True) for o in r.output]
            history += [
                {"type": "custom_tool_call_output", "call_id": o.call_id, "output": "done"}
                for o in r.output
                if o.type == "custom_tool_call"
            ]
            if r.output[-1].type == "message":
                break
        # The first tool listed is the freeform apply_patch: called twice, then an answer.
        assert kinds == [["reasoning", "custom_tool_call"]] * 2 + [["reasoning", "message"]]


def test_prefill_cost_is_paid_on_uncached_tokens_only():
    upstream = running_reasoning_upstream(policy=reply_policy, prefill_s_per_token=2e-4)
    with upstream as (base, _), sdk(base).responses.connect(max_retries=0) as conn:
        long = "All work and no play. " * 500  # about 2,750 tokens: 0.55 s of prefill
        start = time.monotonic()
        conn.send({"type": "response.create", "model": "m", "input": long, "store": False})
        first = recv_done(conn).response
        cold = time.monotonic() - start
        start = time.monotonic()
        conn.send(
            {"type": "response.create", "model": "m", "input": "and?", "previous_response_id": first.id}
        )
        recv_done(conn)
        warm = time.monotonic() - start
    assert cold > 0.5 and warm < 0.2, (cold, warm)


async def test_async_runner_and_the_async_websocket_client():
    async with async_running_reasoning_upstream(policy=reply_policy) as (base, recorder):
        client = AsyncOpenAI(base_url=base, api_key="x", max_retries=0)
        async with client.responses.connect(max_retries=0) as conn:
            await conn.send({"type": "response.create", "model": "m", "input": "hi", "store": False})
            while (event := await conn.recv()).type != "response.completed":
                pass
        async with httpx.AsyncClient() as http:
            raw = await http.post(base + "/responses", json={"model": "m", "input": "hi", "stream": True})
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.text.startswith("event: response.created\ndata: {")
    assert event.response.output_text == "I have seen 1 items."
    assert [r.transport for r in recorder.requests] == ["ws", "sse"]
    assert recorder.ws_connections and "sec-websocket-key" in recorder.ws_connections[0]


def recv_done(conn):
    """Events until the response completes (or fails, or an error event)."""
    while True:
        event = conn.recv()
        if event.type in ("response.completed", "response.failed", "error"):
            return event
