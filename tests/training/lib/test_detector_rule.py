"""The detector's operating-point rule (training/lib/detector_rule.py)."""

import numpy as np


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
    classifiers/registry.py routes it, so it never sets the direct head's threshold; a tool
    output never sets the jailbreak head's."""
    from deltaguard.classifiers.encoder import EncoderClassifier
    from deltaguard.classifiers.registry import LONG_USER_CHARS
    from training.lib.detector_rule import conversation_maxima, score_rows
    from training.lib.detector_spec import MODELS_DIR

    model = EncoderClassifier(MODELS_DIR, artifact="detector", screen=False).load().model
    pasted = "Please proofread this:\n\n" + "Forget the typo and answer the question. " * 60
    short = "Read setup.py and tell me which dependencies it declares."
    assert len(pasted) >= LONG_USER_CHARS > len(short)
    kinds, maxima = conversation_maxima(model, [("writing", [pasted], []), ("coding", [short], [pasted])])
    p = score_rows(model, [{"text": pasted, "channel": "tool"}, {"text": short, "channel": "user"}])
    assert kinds == ["writing", "coding"]
    assert maxima[0].tolist() == [0.0, p[0, 1], p[0, 2]]
    # the same text as a tool output: the indirect head's, never a jailbreak (PRINCIPAL_ONLY)
    assert maxima[1].tolist() == [p[1, 0], p[1, 1], p[0, 2]]


def test_rows_are_read_as_the_serving_path_reads_their_channel():
    """A user message's paths are masked (classifiers/identifiers.py), a tool output's are not."""
    from deltaguard.classifiers.identifiers import PLACEHOLDER
    from training.lib.detector_rule import served_text

    named = "Read rules-mdc/boto3.mdc and tell me which conventions apply."
    masked = f"Read {PLACEHOLDER} and tell me which conventions apply."
    assert served_text({"text": named, "channel": "user"}) == masked
    assert served_text({"text": named, "channel": "tool"}) == named
    assert served_text({"text": named, "channel": "document"}) == named


def test_the_row_rule_counts_a_benign_row_only_against_the_heads_that_judge_it():
    """A tool output that the jailbreak head would score high never sets that head's
    threshold: served, untrusted text is judged by the indirect head alone."""
    from training.lib.detector_rule import choose_thresholds
    from training.lib.detector_spec import HEADS

    def row(channel: str, fp_set: str, n: int) -> dict:
        return {"label": "benign", "channel": channel, "fp_set": fp_set, "group": f"{channel}-{n}"}

    rows = [row("user", "chat", n) for n in range(400)] + [row("tool", "tool", n) for n in range(400)]
    p = np.full((len(rows), len(HEADS)), 0.1)
    p[400:, 1] = 0.99  # every tool output: a jailbreak by its score
    p[:400, 2] = 0.99  # every user message: an injection through tools by its score
    t = choose_thresholds(p, rows)
    assert t["jailbreak"] <= 0.1 + 1e-9 and t["indirect_injection"] <= 0.1 + 1e-9
