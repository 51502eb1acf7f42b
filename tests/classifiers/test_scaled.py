from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from deltaguard.classifiers.scaled import ThresholdScaled, rescale, rescale_one, scale
from deltaguard.parsing import parse_item
from tests.support.toy import ItemCounter

unit = st.floats(0.0, 1.0)


@given(a=unit, b=unit, t=st.floats(0.01, 0.99))
def test_scale_is_monotonic_and_maps_the_threshold_to_half(a, b, t):
    lo, hi = sorted((a, b))
    assert scale(lo, t) <= scale(hi, t)
    assert 0.0 <= scale(a, t) <= 1.0
    assert abs(scale(t, t) - 0.5) < 1e-12 and scale(0.0, t) == 0.0 and abs(scale(1.0, t) - 1.0) < 1e-12


@given(
    a=unit,
    b=unit,
    source=st.sampled_from([0.0, 1.0]) | st.floats(0.001, 0.999),
    target=st.floats(0.01, 0.99),
)
def test_rescale_maps_the_source_threshold_to_the_target_monotonically(a, b, source, target):
    lo, hi = sorted((a, b))
    assert rescale_one(lo, source, target) <= rescale_one(hi, source, target)
    assert abs(rescale_one(1.0, source, target) - 1.0) < 1e-12
    if source > 0.0:  # a threshold of 0 flags everything: 0 is at it
        assert rescale_one(0.0, source, target) == 0.0
    if 0.0 < source < 1.0:
        assert abs(rescale_one(source, source, target) - target) < 1e-12
    assert rescale(np.array([a, b]), source, target).tolist() == [
        rescale_one(a, source, target),
        rescale_one(b, source, target),
    ]


def test_wrapper_scales_scores_and_passes_state_through():
    inner = ItemCounter()
    wrapped = ThresholdScaled(inner, {"secrets": 0.8})
    upd = wrapped.update(wrapped.initial_state(), [parse_item({"role": "user", "content": "BOOM"})])
    assert upd.item_scores == [{"secrets": 1.0}] and upd.state == {"n": 1, "max": {"secrets": 1.0}}
    assert (wrapped.name, wrapped.categories) == (inner.name, inner.categories)
