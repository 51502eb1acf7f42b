"""`awaited_verdicts`: what a distributed gateway holds its turns for, from its settings.

The subscriber itself runs against the broker in test_sink_kafka.py and
test_verdicts_kafka.py."""

from __future__ import annotations

import pytest

from deltaguard.errors import KafkaPathError
from deltaguard.kafka.settings import KafkaSettings
from deltaguard.kafka.subscriber import awaited_verdicts


def test_the_settings_deadline_and_fallback():
    verdicts = awaited_verdicts(KafkaSettings(verdict_timeout_s=4, verdict_fallback="block"), "actions", 30.0)
    assert verdicts is not None and (verdicts.timeout_s, verdicts.fallback) == (4.0, "block")
    assert awaited_verdicts(KafkaSettings(), "off", 30.0) is None  # nothing held: no verdict asked for


def test_a_deadline_the_hold_would_cut_short_is_refused():
    with pytest.raises(
        KafkaPathError, match=r"verdict_timeout_s \(30 s\) must be below release_hold_timeout_s"
    ):
        awaited_verdicts(KafkaSettings(verdict_timeout_s=30), "all", 30.0)
