"""The window screen's evidence: the windows of untrusted text, cut as the detector serves
them, each with the shipped detector's probability on its tool-output head.

Untrusted text is the detection corpus' tool outputs and documents (benign and injected,
the jailbreak rows left out: a tool output is judged for injection only) and the tool
outputs of real benign agent conversations (training/lib/agent_traffic.py), per split; the
train split adds the texts written for coding agents (training/data/coding_notes/: issues,
comments, READMEs, configs, injected and benign), the validation split the development set
written the same way (eval/samples/coding_notes_dev.jsonl).

Scoring every window takes the detector's own time (about 3.5 ms a window on one core), so
a split's evidence is cached in .cache/detector/window-screen/, in a folder per detector
model (a new detector is scored afresh).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.lib.detector_spec import INDIRECT_CHANNELS, MINER, MODELS_DIR, REPO, WORK
from training.lib.log import make_log

CACHE = WORK / "window-screen"  # a folder per detector model: its probabilities are the labels
AUTHORED = {
    "train": sorted((REPO / "training" / "data" / "coding_notes").glob("*.jsonl")),
    "validation": [REPO / "eval" / "samples" / "coding_notes_dev.jsonl"],
}
TRAFFIC_SOURCE = "agent-traffic"  # the real agent conversations' tool outputs
HEAD = "indirect_injection"  # the head that judges untrusted content
log = make_log("train_window_screen")


@dataclass(frozen=True)
class Evidence:
    """One split's windows: their ids (ragged, flat), the text each came from, and the
    detector's probability on each."""

    ids: np.ndarray  # int32, every window's ids end to end, [CLS] and [SEP] included
    starts: np.ndarray  # int64, len(windows) + 1 offsets into ids
    text: np.ndarray  # int32, the text of each window
    prob: np.ndarray  # float64, the detector's tool-output head on each window
    source: np.ndarray  # str, per text
    injected: np.ndarray  # bool, per text

    def window(self, w: int) -> np.ndarray:
        return self.ids[self.starts[w] : self.starts[w + 1]]


def cache_dir(models_dir: Path = MODELS_DIR) -> Path:
    """Where the evidence of the models folder's detector is kept, by its model's sha256."""
    from deltaguard.artifacts import manifest_entry

    return CACHE / manifest_entry("detector", models_dir)["files"]["model"]["sha256"][:16]


def training_rows(models_dir: Path = MODELS_DIR) -> dict[str, Any]:
    """`load_rows`' options for the models folder's detector: its entry's `training.carriers`
    and `training.mined_by` (written by `python -m training.train_detector`), the shipped
    recipe's where the entry predates them."""
    from deltaguard.artifacts import manifest_entry

    training = manifest_entry("detector", models_dir).get("training", {})
    return {
        "carriers": bool(training.get("carriers", False)),
        "miners": tuple(training.get("mined_by", [MINER])),
    }


def untrusted_texts(
    split: str, carriers: bool = False, miners: tuple[str, ...] = (MINER,)
) -> list[tuple[str, str, bool]]:
    """(text, source, injected) of the split's untrusted content, each text once, from the
    rows `load_rows(carriers, miners)` gives (a detector's optional rows: `training_rows`)."""
    from training.lib.agent_traffic import conversation_texts
    from training.lib.detector_rows import load_rows

    out: dict[str, tuple[str, str, bool]] = {}
    for r in load_rows(carriers, miners):
        if r["split"] == split and r["channel"] in INDIRECT_CHANNELS and r["label"] != "jailbreak":
            out.setdefault(r["text"], (r["text"], r["source"], r["label"] == "injection"))
    for _kind, _user, tools, _assistant in conversation_texts(split):
        for text in tools:
            out.setdefault(text, (text, TRAFFIC_SOURCE, False))
    for path in AUTHORED.get(split, []):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                out.setdefault(r["text"], (r["text"], f"coding-notes-{path.stem}", r["label"] == "injected"))
    return [t for t in out.values() if t[0].strip()]


_detector: Any = None


def _load(models_dir: str) -> None:
    global _detector
    from deltaguard.classifiers.encoder import EncoderClassifier

    _detector = EncoderClassifier(Path(models_dir), threads=1, memo_items=0, artifact="detector").load()


def _score(texts: list[str]) -> list[tuple[list[np.ndarray], np.ndarray]]:
    """Per text, its windows as served (every view's) and the head's probability on each."""
    model = _detector.model
    head = model.heads.index(HEAD)
    out = []
    for text in texts:
        views = _detector.views_of(text)
        windows, _ = model.standalone_windows(views, _detector.max_item_windows)
        probs = model.head_probabilities(model.embed(windows))[:, head] if windows else np.zeros(0)
        out.append(([w.ids for w in windows], probs))
    return out


def _in_parts(score: Any, items: list[Any], size: int, models_dir: Path, workers: int | None) -> list[Any]:
    """`score` (a function of a list, run in worker processes that load the detector) over
    `items` in parts of `size`, its results in the items' order."""
    parts = [items[i : i + size] for i in range(0, len(items), size)]
    out: list[Any] = []
    with ProcessPoolExecutor(
        workers or os.cpu_count() or 1, initializer=_load, initargs=(str(models_dir),)
    ) as pool:
        for i, result in enumerate(pool.map(score, parts)):
            out.extend(result)
            log(f"  part {i + 1}/{len(parts)}")
    return out


def collect(split: str, models_dir: Path = MODELS_DIR, workers: int | None = None) -> Evidence:
    """The split's evidence, from the cache or scored now."""
    path = cache_dir(models_dir) / f"{split}.npz"
    if path.exists():
        data = np.load(path, allow_pickle=False)
        return Evidence(**{k: data[k] for k in Evidence.__dataclass_fields__})
    texts = untrusted_texts(split, **training_rows(models_dir))
    log(f"window evidence, {split}: {len(texts)} texts")
    scored = _in_parts(_score, [t[0] for t in texts], 500, models_dir, workers)
    ids, starts, owner, probs = [], [0], [], []
    for i, (windows, p) in enumerate(scored):
        for w in windows:
            ids.append(w.astype(np.int32))
            starts.append(starts[-1] + len(w))
            owner.append(i)
        probs.append(p)
    evidence = Evidence(
        ids=np.concatenate(ids) if ids else np.zeros(0, np.int32),
        starts=np.array(starts, dtype=np.int64),
        text=np.array(owner, dtype=np.int32),
        prob=np.concatenate(probs) if probs else np.zeros(0),
        source=np.array([t[1] for t in texts]),
        injected=np.array([t[2] for t in texts]),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **{k: getattr(evidence, k) for k in Evidence.__dataclass_fields__})
    tmp.replace(path)
    return evidence


CHUNKED = 0.02  # every chunk of a window the detector scores this high is scored alone
CHUNK_SAMPLE = 0.1  # and the chunks of this share of the others, drawn at random


@dataclass(frozen=True)
class Chunks:
    """Chunks of a split's windows (classifiers/window_screen.py `chunk_bounds`), each with
    the detector's probability on it read alone, as a window of its own."""

    window: np.ndarray  # int32, the evidence window it is cut from
    start: np.ndarray  # int32, among that window's content ids
    end: np.ndarray
    prob: np.ndarray  # float64

    def ids(self, evidence: Evidence, c: int) -> np.ndarray:
        content = evidence.window(int(self.window[c]))[1:-1]
        return content[self.start[c] : self.end[c]]


def _score_chunks(chunks: list[np.ndarray]) -> np.ndarray:
    from deltaguard.classifiers.encoder_model import Window

    model = _detector.model
    cls, sep = model.cls_id, model.sep_id
    windows = [Window(ids=np.concatenate([[cls], c, [sep]]).astype(np.int64), context=0) for c in chunks]
    return model.head_probabilities(model.embed(windows))[:, model.heads.index(HEAD)]


def collect_chunks(
    split: str, evidence: Evidence, models_dir: Path = MODELS_DIR, workers: int | None = None
) -> Chunks:
    """The split's chunk evidence, from the cache or scored now."""
    from deltaguard.classifiers.window_screen import chunk_bounds

    path = cache_dir(models_dir) / f"{split}-chunks.npz"
    if path.exists():
        data = np.load(path, allow_pickle=False)
        return Chunks(**{k: data[k] for k in Chunks.__dataclass_fields__})
    rng = np.random.default_rng(0)
    picked = (evidence.prob >= CHUNKED) | (rng.random(len(evidence.prob)) < CHUNK_SAMPLE)
    bounds = [(w, a, b) for w in np.flatnonzero(picked) for a, b in chunk_bounds(len(evidence.window(w)) - 2)]
    cut = np.array(bounds, np.int32).reshape(-1, 3)  # window, start, end
    texts = [evidence.window(w)[1:-1][a:b] for w, a, b in cut]
    log(f"chunk evidence, {split}: {len(texts)} chunks of {int(picked.sum())} windows")
    probs = np.array(_in_parts(_score_chunks, texts, 4096, models_dir, workers), dtype=np.float64)
    chunks = Chunks(window=cut[:, 0], start=cut[:, 1], end=cut[:, 2], prob=probs)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **{k: getattr(chunks, k) for k in Chunks.__dataclass_fields__})
    tmp.replace(path)
    return chunks
