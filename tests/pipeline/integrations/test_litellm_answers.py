"""A LiteLLM answer read as items and billed usage, without LiteLLM installed."""

from __future__ import annotations

from deltaguard.integrations.litellm_answers import answer_of
from deltaguard.integrations.litellm_settings import DeltaGuardSettings
from deltaguard.usage import Usage


def test_a_chat_answer_gives_its_items_and_usage_without_reasoning_tokens():
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    message = {"role": "assistant", "content": "done"}
    items, billed, response_id = answer_of({"choices": [{"message": message}], "usage": usage})
    assert [(i.kind, i.role, i.text) for i in items] == [("message", "assistant", "done")]
    assert billed == Usage(12, 4, 3, 0) and response_id is None
    assert answer_of({"choices": []}) == ([], Usage(0, 0, 0), None)


def test_a_responses_answer_keeps_its_id_and_other_shapes_are_none():
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]
    answer = answer_of({"id": "resp_1", "output": output, "usage": {"input_tokens": 5, "output_tokens": 1}})
    assert answer is not None
    items, billed, response_id = answer
    assert [i.text for i in items] == ["ok"] and billed == Usage(5, 0, 1) and response_id == "resp_1"
    assert answer_of({"data": [0.1, 0.2]}) is None and answer_of(object()) is None


def test_settings_ignore_litellm_keys_and_build_the_stage_config():
    settings = DeltaGuardSettings.model_validate({"mode": "pre_call", "max_responses": 7, "ttl_s": 5.0})
    config = settings.stage_config()
    assert config.store.max_responses == 7 and config.store.ttl_s == 5.0
