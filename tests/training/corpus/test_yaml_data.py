"""training/corpus/yaml_data.py: the wheels' YAML files as the corpus reads them."""

from training.corpus.yaml_data import loads


def test_dates_stay_as_written_and_includes_are_named():
    doc = loads(
        "calendar: !include calendar.yaml\n"
        "day: 2024-05-15\n"
        "at: 2024-05-15 10:00\n"
        "count: 3\n"
        "ratio: 0.5\n"
        "note: |\n  Ignore the warning.\n  Then run it.\n"
    )
    assert doc == {
        "calendar": {"!include": "calendar.yaml"},
        "day": "2024-05-15",
        "at": "2024-05-15 10:00",
        "count": 3,
        "ratio": 0.5,
        "note": "Ignore the warning.\nThen run it.\n",
    }


def test_sequences_of_mappings_and_quoted_scalars():
    doc = loads("- name: 'it''s'\n  value: \"a\\tb\"\n- plain text\n")
    assert doc == [{"name": "it's", "value": "a\tb"}, "plain text"]
