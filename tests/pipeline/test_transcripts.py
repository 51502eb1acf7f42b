from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaguard.errors import TranscriptError
from deltaguard.transcripts import Conversation, read_transcripts


def write(tmp_path, lines):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n")
    return path


def test_good_and_bad_lines_are_reported_separately(tmp_path):
    good = json.dumps(
        {"id": "a", "turns": [{"input": [{"role": "user", "content": "hi"}]}], "labels": {"x": 1}}
    )
    path = write(
        tmp_path,
        [
            good,
            "{not json",
            json.dumps({"id": "b", "turns": [{"input": [{"role": "user", "content": 5}]}]}),
            json.dumps({"turns": []}),
            b"\xff\xfe",
            json.dumps({"id": "c", "turns": [{"output": []}]}),
            good.replace('"a"', '"d"'),
        ],
    )
    out = list(read_transcripts(path))
    convs = [o for o in out if isinstance(o, Conversation)]
    errors = [o for o in out if isinstance(o, TranscriptError)]
    assert [c.id for c in convs] == ["a", "d"]
    assert [(e.line, e.field.split(".")[-1] if "." in e.field else e.field) for e in errors] == [
        (2, "line"),
        (3, "content"),
        (4, "id"),
        (5, "line"),
        (6, "input"),
    ]
    assert str(errors[1]).startswith(f"{path}:3: turns[0].input[0].content")


def test_unknown_items_are_counted_not_fatal(tmp_path):
    line = json.dumps(
        {
            "id": "a",
            "turns": [
                {
                    "input": [{"type": "mystery", "x": 1}, {"role": "user", "content": "hi"}],
                    "output": [{"type": "reasoning"}],
                }
            ],
        }
    )
    (conv,) = read_transcripts(write(tmp_path, [line]))
    assert conv.unscored_items == 2


def test_deep_nesting_is_an_error_not_a_crash(tmp_path):
    deep = '{"id": "a", "turns": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (err,) = read_transcripts(write(tmp_path, [deep]))
    assert isinstance(err, TranscriptError)


lines = st.binary(max_size=120) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=15),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["id", "turns", "input", "output", "role", "content", "type"]), inner, max_size=4
        )
    ),
    max_leaves=12,
).map(lambda v: json.dumps(v).encode())


@settings(max_examples=5_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(batch=st.lists(lines, min_size=1, max_size=3))
def test_reader_never_crashes_on_garbage(tmp_path_factory, batch):
    path = tmp_path_factory.getbasetemp() / "fuzz.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in batch) + b"\n")
    for entry in read_transcripts(path):
        assert isinstance(entry, Conversation | TranscriptError)
