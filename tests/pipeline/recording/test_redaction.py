"""Redaction: secret and PII values in every item shape replaced by a marker."""

from __future__ import annotations

import json

from deltaguard.classifiers.pii import PiiClassifier
from deltaguard.classifiers.secrets import SecretsClassifier
from deltaguard.parsing import parse_item, parse_items
from deltaguard.recording.redaction import find_sensitive, mask_text, redact_items, redacted_range
from tests.pipeline.recording.conftest import AWS_KEY, EMAIL


def test_redaction_of_every_item_shape_and_pem_blocks():
    body = "\n".join(["MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2+1A6fBdHZ3kLk9f0e8Yh4QwX2Z1"] * 4)
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    token = "ghp_" + "aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"
    items = parse_items(
        [
            {"role": "user", "content": [{"type": "input_text", "text": f"mail {EMAIL}"}]},
            {"type": "function_call", "call_id": "c", "name": "send", "arguments": json.dumps({"t": token})},
            {"type": "function_call_output", "call_id": "c", "output": f"ok\n{pem}\nthanks"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"key {AWS_KEY}"}]},
        ]
    )
    before = [json.dumps(i.raw) for i in items]
    wire, found = redact_items(items)
    assert [json.dumps(i.raw) for i in items] == before  # inputs untouched
    text = json.dumps(wire)
    for secret in (EMAIL, token, body[:64], AWS_KEY):
        assert secret not in text
    assert wire[2]["output"] == "ok\n[REDACTED:private_key]\nthanks"
    assert found.kinds == {"email": 1, "github_token": 1, "private_key": 1, "aws_access_key_id": 1}
    redacted = parse_items(wire)
    for clf in (SecretsClassifier(), PiiClassifier()):
        assert clf.update(clf.initial_state(), redacted).findings == []
    # Placeholders are not secrets (the validators decide, as in the classifiers).
    assert find_sensitive("AWS_SECRET_ACCESS_KEY=your-secret-key-here-xxxxxxxx") == []


def test_cuts_move_a_range_onto_the_redacted_text():
    text = f"mail {EMAIL} now\nkey {AWS_KEY} then the injected line"
    item = parse_item({"type": "function_call_output", "call_id": "c", "output": text})
    (wire,), found = redact_items([item])
    redacted = parse_item(wire).text
    start = text.index("the injected line")
    lo, hi = redacted_range(found.edits[0], start, start + len("the injected line"))
    assert redacted[lo:hi] == "the injected line"
    # A range inside a value takes in its mask; one over its edge, the whole mask.
    at = text.index(EMAIL)
    lo, hi = redacted_range(found.edits[0], at + 2, at + 5)
    assert redacted[lo:hi] == "[REDACTED:email]"
    lo, hi = redacted_range(found.edits[0], 0, at + 3)
    assert redacted[lo:hi] == "mail [REDACTED:email]"
    assert mask_text(text) == (redacted, found.edits[0])


CARD = "4111 1111 1111 1111"


def test_fields_that_are_not_scored_and_object_keys_are_redacted_too():
    items = parse_items(
        [
            {"role": "user", "content": "hello", "metadata": {"note": f"key {AWS_KEY}", f"card {CARD}": 1}},
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": "ok",
                "extra": [{"type": "custom_part", "blob": {f"mail {EMAIL}": ["x"]}}],
            },
            {"type": "mystery_result", "id": f"id-{AWS_KEY}", "data": {f"key {AWS_KEY}": f"card {CARD}"}},
            {"role": "user", "content": [{"type": "input_image", "detail": f"by {EMAIL}"}]},
        ]
    )
    wire, found = redact_items(items)
    text = json.dumps(wire)
    for value in (AWS_KEY, CARD, EMAIL):
        assert value not in text, value
    assert wire[0]["content"] == "hello" and wire[1]["output"] == "ok"  # scored text: untouched here
    assert wire[0]["metadata"]["note"] == "key [REDACTED:aws_access_key_id]"
    assert found.items == [0, 1, 2, 3] and {"aws_access_key_id", "email"} <= set(found.kinds)
