import json

import training.lib.binary_text as binary_text
import training.lib.carrier_rows as carrier_rows
import training.lib.coding_agent as coding_agent
import training.lib.detector_rows as detector_rows
import training.lib.hard_negatives as hard_negatives
import training.lib.real_rows as real_rows


def corpus_row(source, label, group, split="train"):
    fp_set = "prompts" if label == "benign" else None
    return {"text": f"{source} {group}", "label": label, "source": source, "family": label,
            "channel": "user", "group": group, "split": split, "fp_set": fp_set}  # fmt: skip


def own(source):
    return lambda *args: [corpus_row(source, "benign", f"{source}:0")]


def test_the_carriers_rows_join_only_when_asked(monkeypatch, tmp_path):
    corpus = [corpus_row("s-labs", "injection", "s-labs:1"), corpus_row("agentdojo", "benign", "agentdojo:1")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    monkeypatch.setattr(detector_rows, "WORK", tmp_path)
    monkeypatch.setattr(binary_text, "binary_text_rows", own("binary"))
    monkeypatch.setattr(coding_agent, "coding_agent_rows", own("coding-agent"))
    monkeypatch.setattr(coding_agent, "embedded_rows", own("embedded"))
    monkeypatch.setattr(real_rows, "real_rows", own("real"))
    monkeypatch.setattr(hard_negatives, "mined_rows", own("mined"))
    monkeypatch.setattr(carrier_rows, "carrier_rows", own(carrier_rows.SOURCE))
    shipped = detector_rows.load_rows()
    sources = ["s-labs", "agentdojo", "binary", "coding-agent", "embedded", "real", "mined"]
    assert [r["source"] for r in shipped] == sources
    placed = corpus_row("carriers", "benign", "carriers:0")
    assert detector_rows.load_rows(carriers=True) == [*shipped, placed]
    rest, scored = detector_rows.fold_rows(["s-labs"], carriers=True)
    assert "carriers" in {r["source"] for r in rest} and "s-labs" not in {r["source"] for r in rest}
    assert [r["source"] for r in scored] == ["s-labs"]  # no test split among the rest


def test_a_later_rounds_mined_windows_join_less_what_an_earlier_round_mined(monkeypatch, tmp_path):
    (tmp_path / "rows.jsonl").write_text(json.dumps(corpus_row("s-labs", "injection", "s-labs:1")) + "\n")
    monkeypatch.setattr(detector_rows, "WORK", tmp_path)
    for module, name in [(binary_text, "binary_text_rows"), (coding_agent, "coding_agent_rows"),
                         (coding_agent, "embedded_rows"), (real_rows, "real_rows")]:  # fmt: skip
        monkeypatch.setattr(module, name, lambda *args: [])
    mined = {
        "first": [corpus_row("real-mined", "benign", "a"), corpus_row("real-mined", "benign", "a")],
        "second": [corpus_row("real-mined", "benign", "a"), corpus_row("real-mined", "benign", "b")],
    }
    caches = []

    def mined_rows(corpus, cache, miner):
        caches.append(cache.name)
        return mined[miner]

    monkeypatch.setattr(hard_negatives, "mined_rows", mined_rows)
    groups = [r["group"] for r in detector_rows.load_rows(miners=("first", "second"))]
    assert groups == ["s-labs:1", "a", "a", "b"]  # a round keeps its own repeats, as the shipped one did
    assert caches == ["mined-first.jsonl", "mined-second.jsonl"]
