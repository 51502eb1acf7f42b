"""The detector's operating-point rule (training/lib/detector_rule.py)."""

import numpy as np

from training.lib.detector_rule import most_sensitive_threshold


def test_lowest_threshold_within_every_budget():
    chat = np.linspace(0.0, 0.99, 100)  # 1% budget: one row may be flagged
    tools = np.array([0.1] * 98 + [0.5, 0.97])  # 1%: the 0.97 row may be flagged, not the 0.5
    t = most_sensitive_threshold(
        {"chat": (chat, [str(i) for i in range(100)]), "tool": (tools, [str(i) for i in range(100)])},
        {"chat": 0.01, "tool": 0.01},
    )
    assert np.mean(chat >= t) <= 0.01 and np.mean(tools >= t) <= 0.01
    assert t == np.nextafter(0.98, np.inf)  # chat's second highest binds; anything lower breaks it


def test_a_templated_group_counts_once():
    # 30 variants of one article at 0.99 and 70 distinct documents below 0.4: by rows the
    # article alone is 30% of the set, by groups it is 1 of 71 (a 2% budget allows it).
    scores = np.array([0.99] * 30 + list(np.linspace(0.0, 0.4, 70)))
    groups = ["article"] * 30 + [f"doc{i}" for i in range(70)]
    t = most_sensitive_threshold({"lookalike": (scores, groups)}, {"lookalike": 0.02})
    assert 0.4 < t <= 0.99


def test_a_set_too_small_for_its_budget_sets_nothing():
    small = np.array([0.95] * 10)  # 10 rows cannot measure a 2% budget
    big = np.linspace(0.0, 0.5, 200)
    t = most_sensitive_threshold(
        {"prompts": (small, list("abcdefghij")), "chat": (big, [str(i) for i in range(200)])},
        {"prompts": 0.02, "chat": 0.005},
    )
    assert t <= 0.5


def test_conversation_thresholds_hold_every_agent_kind_to_its_budget():
    from training.lib.detector_rule import conversation_rates, conversation_thresholds
    from training.lib.detector_spec import HEADS

    rng = np.random.default_rng(0)
    kinds = ["coding"] * 400 + ["chat"] * 150
    maxima = rng.uniform(0.0, 0.9, size=(550, len(HEADS)))
    maxima[5, 2] = 0.99  # one coding conversation's tool output: 1 of 400 may be flagged at 0.5%
    maxima[450, 0] = 0.98  # chat: 150 conversations at 0.5% allow none
    t = conversation_thresholds(kinds, maxima, budget=0.005)
    assert t["indirect_injection"] <= 0.99  # the lone coding outlier is within budget
    assert t["prompt_injection"] > 0.98  # the chat outlier is not
    for h, head in enumerate(HEADS):  # each head within budget on each kind
        coding = maxima[:400, h] >= t[head]
        assert coding.mean() <= 0.005 and not (maxima[400:, h] >= t[head]).any()
    rates = conversation_rates(kinds, maxima, t)  # any head: at most the heads' budgets together
    assert rates["coding"] <= len(HEADS) * 0.005 and rates["chat"] == 0.0


def test_conversation_thresholds_leave_an_all_zero_head_at_zero():
    from training.lib.detector_rule import conversation_thresholds
    from training.lib.detector_spec import HEADS

    maxima = np.zeros((50, len(HEADS)))
    assert conversation_thresholds(["chat"] * 50, maxima) == {h: 0.0 for h in HEADS}


def test_conversation_maxima_route_a_pasted_document_as_the_default_set_serves_it():
    """A user message of LONG_USER_CHARS or more is judged by the heads of untrusted text, as
    classifiers/registry.py routes it, so it never sets the direct head's threshold."""
    from deltaguard.classifiers.encoder import EncoderClassifier
    from deltaguard.classifiers.registry import LONG_USER_CHARS
    from training.lib.detector_rule import conversation_maxima, score_rows
    from training.lib.detector_spec import MODELS_DIR

    model = EncoderClassifier(MODELS_DIR, artifact="detector", screen=False).load().model
    pasted = "Please proofread this:\n\n" + "Forget the typo and answer the question. " * 60
    short = "Read setup.py and tell me which dependencies it declares."
    assert len(pasted) >= LONG_USER_CHARS > len(short)
    kinds, maxima = conversation_maxima(model, [("writing", [pasted], []), ("coding", [short], [pasted])])
    p = score_rows(model, [{"text": pasted}, {"text": short}])
    assert kinds == ["writing", "coding"]
    assert maxima[0].tolist() == [0.0, p[0, 1], p[0, 2]]
    assert maxima[1].tolist() == [p[1, 0], max(p[0, 1], p[1, 1]), p[0, 2]]
