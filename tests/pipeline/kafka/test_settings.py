"""`KafkaSettings`: the checks that keep the topics of the Kafka path apart."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deltaguard.kafka.settings import KafkaSettings


def test_every_kind_of_record_has_a_topic_of_its_own():
    s = KafkaSettings()
    assert s.topic_partitions()[s.verdicts_topic] == s.verdicts_partitions == 4
    with pytest.raises(ValidationError, match=r"'deltaguard\.flags' is named twice"):
        KafkaSettings(verdicts_topic="deltaguard.flags")
    with pytest.raises(ValidationError, match="named twice"):
        KafkaSettings(errors_topic="deltaguard-monitor-conversations-changelog")


def test_the_verdict_fallback_is_release_or_block():
    assert (KafkaSettings().verdict_timeout_s, KafkaSettings().verdict_fallback) == (10.0, "release")
    with pytest.raises(ValidationError, match="verdict_fallback"):
        KafkaSettings(verdict_fallback="allow")
    with pytest.raises(ValidationError, match="verdict_timeout_s"):
        KafkaSettings(verdict_timeout_s=0)
