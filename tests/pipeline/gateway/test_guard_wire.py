"""The guard API's wire models: what they accept, how they refuse, and that the served
description is theirs."""

from __future__ import annotations

import pytest
from openapi_spec_validator import validate

from deltaguard.gateway.guard_openapi import OPENAPI
from deltaguard.gateway.guard_wire import InputCheck, OutputCheck, PortkeyWebhook, Verdict, validated
from deltaguard.gateway.http_errors import Error, RequestError

REF = "#/components/schemas/{model}"


def refusal(model, body, max_id_length=256) -> RequestError:
    with pytest.raises(RequestError) as exc:
        validated(model, body, max_id_length=max_id_length)
    return exc.value


def test_the_description_is_valid_and_its_schemas_are_the_models():
    validate(OPENAPI)
    schemas = OPENAPI["components"]["schemas"]
    for model, mode in ((InputCheck, "validation"), (OutputCheck, "validation"), (Verdict, "serialization")):
        own = model.model_json_schema(mode=mode, ref_template=REF)
        own.pop("$defs", None)
        assert schemas[model.__name__] == own, model.__name__
    assert schemas["Error"]["properties"]["error"] == {"$ref": REF.format(model="ErrorObject")}
    assert set(schemas["Error"]["required"]) == set(Error.model_json_schema()["required"])


def test_a_conversation_is_sent_in_exactly_one_shape():
    assert InputCheck.model_validate({"messages": []}).conversation_field == "messages"
    assert refusal(InputCheck, {}).code == "missing_required_parameter"
    both = refusal(InputCheck, {"messages": [], "input": "x"})
    assert (both.code, both.param) == ("invalid_request", "messages")


def test_nothing_is_coerced_and_unknown_fields_are_ignored():
    assert refusal(InputCheck, {"input": "x", "instructions": 5}).code == "invalid_type"
    assert refusal(InputCheck, {"input": "x", "tools": [("a", 1)]}).param == "tools"
    assert validated(InputCheck, {"input": "x", "model": "gpt", "temperature": 0}, max_id_length=8)


def test_a_continuation_id_is_held_to_the_gateways_limit():
    ok = validated(InputCheck, {"input": "x", "continuation_id": "guard_12"}, max_id_length=8)
    assert ok.continuation_id == "guard_12"
    long = refusal(InputCheck, {"input": "x", "continuation_id": "guard_123"}, max_id_length=8)
    assert (long.code, long.param, long.message) == (
        "invalid_value",
        "continuation_id",
        "continuation_id is longer than 8 characters",
    )


def test_an_output_check_bills_the_usage_given_else_the_responses_own():
    answer = {
        "choices": [{"message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    check = validated(OutputCheck, {"input": "x", "response": answer}, max_id_length=256)
    assert check.answer_field == "response" and check.billed_usage == answer["usage"]
    given = {"prompt_tokens": 9, "completion_tokens": 2}
    check = validated(OutputCheck, {"input": "x", "response": answer, "usage": given}, max_id_length=256)
    assert check.billed_usage == given
    bad = refusal(OutputCheck, {"input": "x", "output": [], "usage": {"prompt_tokens": 1.5}})
    assert (bad.code, bad.param) == ("invalid_usage", "usage")


def test_an_output_check_may_name_its_turn_by_id_alone():
    check = validated(OutputCheck, {"continuation_id": "guard_1", "output": []}, max_id_length=256)
    assert check.conversation_field is None and check.answer_field == "output"


def test_a_portkey_call_reads_its_aliases_and_takes_any_answer_shape():
    hook = validated(
        PortkeyWebhook,
        {"eventType": "afterRequestHook", "request": {"json": {"input": "x"}}, "response": "not json"},
        max_id_length=256,
    )
    assert hook.event_type == "afterRequestHook" and hook.request.body == {"input": "x"}
    assert hook.response is None
