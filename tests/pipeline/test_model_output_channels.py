"""Every channel of the model's own output is judged as model output: a secret it leaks is
caught in a reasoning summary, a tool call's arguments, a citation's title and a refusal,
as in its message text; benign text in the same shapes is not flagged."""

from __future__ import annotations

import json

import pytest

from deltaguard.parsing import parse_item

LEAK = "Use the key AKIAIOSFODNN7EXAMPLE with wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY to deploy."
BENIGN = "The user wants the install steps: pip install, then the --help flag for the subcommands."


def assistant(part: dict) -> dict:
    return {"type": "message", "role": "assistant", "content": [part]}


def shapes(text: str) -> dict[str, dict]:
    """One output item of each shape, carrying `text` where that shape carries the model's words."""
    part = {"type": "output_text", "text": "See the source for details."}
    citation = {
        "type": "url_citation",
        "url": "https://docs.example",
        "title": text,
        "start_index": 0,
        "end_index": 3,
    }
    return {
        "reasoning_summary": {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": text}],
        },
        "function_call_arguments": {
            "type": "function_call",
            "call_id": "c1",
            "name": "send_note",
            "arguments": json.dumps({"body": text}),
        },
        "annotation_title": assistant({**part, "annotations": [citation]}),
        "refusal": {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": text}],
        },
        "message_text": {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        },
    }


def verdict(scorer, output: dict):
    user = parse_item({"role": "user", "content": "Summarise the install steps for me."})
    answer = parse_item(output)
    assert answer.role == "assistant" and not answer.from_client  # judged as the model's own words
    return scorer.verdict(scorer.fold(scorer.empty(), [user, answer]))


@pytest.mark.parametrize("channel", sorted(shapes("x")))
def test_a_secret_the_model_leaks_is_caught_in_every_output_channel(scorer, channel):
    assert "secrets" in verdict(scorer, shapes(LEAK)[channel]).flagged_categories


@pytest.mark.parametrize("channel", sorted(shapes("x")))
def test_benign_output_in_the_same_shapes_is_not_flagged(scorer, channel):
    assert verdict(scorer, shapes(BENIGN)[channel]).flagged_categories == []


def test_a_citations_title_is_part_of_the_messages_text():
    item = parse_item(shapes("Release notes for 2.0")["annotation_title"])
    assert item.text == "See the source for details.\nRelease notes for 2.0"
