"""What the recording tests share: items with secrets and PII in them, flag events."""

from __future__ import annotations

import json

import pytest

from deltaguard.classifiers.pii import PiiClassifier
from deltaguard.classifiers.secrets import SecretsClassifier
from deltaguard.events import FlagEvent
from deltaguard.parsing import parse_item
from deltaguard.state.scoring import Scorer

AWS_KEY = "AKIAZ7QWERTYUIOPLKJH"  # shape-valid, not a real key
EMAIL = "jane.doe@corp-mail.com"


def user(text):
    return parse_item({"role": "user", "content": text})


def tool(call_id, text):
    return parse_item({"type": "function_call_output", "call_id": call_id, "output": text})


def call(call_id, path):
    return parse_item(
        {"type": "function_call", "call_id": call_id, "name": "cat", "arguments": json.dumps({"path": path})}
    )


def db_bytes(path):
    """Everything SQLite wrote for the store: the file, its WAL and shared memory."""
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def flag(rec, categories, decision="block", lane="gate"):
    return FlagEvent.build(
        conversation_id=rec.conversation_id,
        response_id=rec.response_id,
        lane=lane,
        decision=decision,
        categories=categories,
        scores={c: 1.0 for c in categories},
        classifier_versions={},
    )


@pytest.fixture
def rules_scorer():
    return Scorer([SecretsClassifier(), PiiClassifier()])
