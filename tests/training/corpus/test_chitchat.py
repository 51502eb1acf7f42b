"""chitchat's short messages (training/corpus/chitchat.py load_short_messages)."""

import json

from training.corpus import chitchat


class _Wheel:
    def __init__(self, data):
        self.data = data

    def read(self, path):
        assert path == chitchat.PATH
        return json.dumps(self.data).encode()


def _conversation(*turns):
    return {"messages": [[{"text": t}] for t in turns]}


def test_short_messages_are_distinct_unreserved_and_grouped_with_their_first_conversation(monkeypatch):
    data = {
        "c0": _conversation("reserved, never read", "sure."),  # position 0: reserved
        "c1": _conversation("sure.", "this message is far too long to count as a short one"),
        "c2": _conversation("Sure.", "why?"),
        **{f"c{i}": _conversation("hi") for i in range(3, 10)},
        "c10": _conversation("only in a reserved conversation"),
    }
    monkeypatch.setattr(chitchat, "open_wheel", lambda name, cache=None: _Wheel(data))
    rows = chitchat.load_short_messages()
    texts = {r.text: r.group for r in rows}
    assert texts == {"sure.": "chitchat:c1", "why?": "chitchat:c2", "hi": "chitchat:c3"}
    assert all(r.label == "benign" and r.source == "chitchat-short" for r in rows)
