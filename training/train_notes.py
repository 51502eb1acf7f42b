"""Build the notes model: `python -m training.train_notes`.

classifiers/notes.py reads each paragraph of untrusted content that asks something and
judges whether it is an instruction planted for the model. One command, about an hour on
2 cores:

1. training/lib/notes_rows.py's paragraphs: fifteen authors' texts of what a coding agent
   reads (their injections' paragraphs positive, the rest and their hard benign texts
   negative), a sample of training/lib/coding_agent.py's templated carriers, and the asking
   paragraphs of the train split's real documents, agent files and agent tool outputs
   (negative);
2. in the build venv (training/lib/build_venv.py): all-MiniLM-L6-v2, all six layers, mean
   pooling, L2 normalisation and one linear head, fine-tuned on each paragraph's first
   NOTE_TOKENS - 2 tokens (training/lib/detector_finetune.py; each class weighs half, and
   within a class each source the square root of its size), exported per-token int8
   (training/lib/onnx_export.py): the first model;
3. the over-defence loop: the first model scores a larger sample of the train split's real
   asking paragraphs, and those it scores highest join the rows as negatives
   (`notes_rows.mined_rows`); the second model, trained the same way on all of them, is
   the one shipped;
4. the threshold on the validation split's real agent conversations: the lowest at which
   no kind of them has more than CONVERSATION_BUDGET flagged through its tool outputs,
   and no lower than FLOOR; figures on eval/samples/coding_notes_dev.jsonl (another
   author's set, never trained on) at it;
5. `models/notes-v2.onnx`, its heads and the manifest entry "notes", kept only if the
   served classifier passes deltaguard.classifiers.checks.

`--models-dir DIR` writes into DIR (a copy of the models folder) instead.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from training.lib.detector_spec import BASES, DEFAULT_BASE, MODELS_DIR, REPO, WORK
from training.lib.detector_windows import weights as weights_per_head
from training.lib.log import make_log

ARTIFACT = "notes"
VERSION = "2"
RELEASE = "notes-v2"
LAYERS = 6  # all of MiniLM's: two, as the detector has, ranked new authors' notes at chance
EPOCHS = 2
LR = 3e-5
CONVERSATION_BUDGET = 0.005  # of each kind of real agent conversation, flagged at most
FLOOR = 0.5
DEV = REPO / "eval" / "samples" / "coding_notes_dev.jsonl"
OUT = WORK / "notes"

log = make_log("train_notes")


def weights(rows: list[dict[str, Any]]) -> list[float]:
    """Each class weighs half; within a class a source weighs the square root of its size
    (training/lib/detector_windows.py's weighting, with one head)."""
    heads = weights_per_head([{"targets": [float(r["label"])], "source": r["source"]} for r in rows])
    return list(heads[:, 0])


def windows_file(rows: list[dict[str, Any]], tokenizer: Path, out: Path) -> Path:
    from tokenizers import Tokenizer

    from deltaguard.classifiers.encoder_model import special_ids
    from deltaguard.classifiers.notes import NOTE_TOKENS

    tok = Tokenizer.from_file(str(tokenizer))
    tok.no_truncation()
    tok.no_padding()
    cls_id, sep_id = special_ids(tok)
    path = out / "train-windows.jsonl"
    with path.open("w") as f:
        for r, w in zip(rows, weights(rows), strict=True):
            ids = tok.encode(r["text"], add_special_tokens=False).ids[: NOTE_TOKENS - 2]
            f.write(
                json.dumps({"ids": [cls_id, *ids, sep_id], "targets": [float(r["label"])], "w": [w]}) + "\n"
            )
    return path


def train_and_export(rows: list[dict[str, Any]], tokenizer: Path, epochs: int, out: Path) -> Path:
    """Fine-tune, export and quantize into `out` (reused when its model is there)."""
    from training.lib.build_venv import build_python
    from training.lib.detector_model import minilm_dir

    out.mkdir(parents=True, exist_ok=True)
    done = out / "model.onnx"
    if done.exists():
        log(f"reusing {done}")
        return out
    cmd = ["env", f"PYTHONPATH={REPO}", str(build_python()), "-m"]
    if not (out / "heads-float.npz").exists():
        train = str(windows_file(rows, tokenizer, out))
        args = [str(epochs), "--layers", str(LAYERS), "--lr", str(LR)]
        subprocess.run(
            [*cmd, "training.lib.detector_finetune", train, str(minilm_dir()), str(out), *args], check=True
        )
    export = [*cmd, "training.lib.onnx_export"]
    subprocess.run([*export, "export", str(out / "hf"), str(out / "float.onnx")], check=True)
    subprocess.run(
        [*export, "quantize", str(out / "float.onnx"), str(done), str(out / "dynamic.onnx")], check=True
    )
    heads = np.load(out / "heads-float.npz")
    np.savez_compressed(
        out / "heads.npz",
        heads=np.array(["prompt_injection"]),
        coef=heads["coef"],
        intercept=heads["intercept"],
        format_version=np.array(1),
    )
    return out


def served(out: Path, tokenizer: Path):
    from deltaguard.classifiers.encoder_model import EncoderModel, WindowShape
    from deltaguard.classifiers.notes import NOTE_TOKENS, NotesClassifier

    shape = WindowShape(NOTE_TOKENS, NOTE_TOKENS)
    return NotesClassifier(
        model=EncoderModel.from_files(out / "model.onnx", tokenizer, out / "heads.npz", 2, shape)
    )


def text_maxima(clf, texts: list[str]) -> np.ndarray:
    """Per text, the highest probability of its asking paragraphs (0 when none asks)."""
    out = np.zeros(len(texts))
    for start in range(0, len(texts), 64):
        for i, found in enumerate(clf.probabilities(texts[start : start + 64])):
            out[start + i] = max((p for _, _, p in found), default=0.0)
    return out


def choose_threshold(clf) -> tuple[float, dict[str, float]]:
    from training.lib.agent_traffic import conversation_texts
    from training.lib.thresholds import flagged_share, per_kind_floor

    convs = [(kind, read) for kind, _, read, _ in conversation_texts("validation") if read]
    unique = sorted({t for _, read in convs for t in read})
    score = dict(zip(unique, text_maxima(clf, unique), strict=True))
    kinds = [kind for kind, _ in convs]
    maxima = np.array([max(score[t] for t in read) for _, read in convs])
    threshold = max(FLOOR, per_kind_floor(kinds, maxima, CONVERSATION_BUDGET))
    return threshold, flagged_share(kinds, maxima >= threshold)


def dev_metrics(clf, threshold: float) -> dict[str, Any]:
    from sklearn.metrics import roc_auc_score

    cases = [json.loads(line) for line in DEV.read_text().splitlines() if line.strip()]
    p = text_maxima(clf, [c["text"] for c in cases])
    y = np.array([c["label"] == "injected" for c in cases])
    pos, neg = p[y], p[~y]
    return {
        "set": str(DEV.relative_to(REPO)),
        "auc": round(float(roc_auc_score(y, p)), 4),
        "injected_flagged": f"{int((pos >= threshold).sum())}/{len(pos)}",
        "benign_flagged": f"{int((neg >= threshold).sum())}/{len(neg)}",
    }


def build(epochs: int, models_dir: Path) -> int:
    from deltaguard.artifacts import sha256_file
    from training.lib.conformance import publish_entry
    from training.lib.detector_model import tokenizer_path
    from training.lib.notes_rows import authored_rows, mined_rows, real_rows, templated_rows

    rows = authored_rows() + templated_rows() + real_rows()
    tokenizer = tokenizer_path(BASES[DEFAULT_BASE])
    # the over-defence loop: what a first model over-weights in real text trains the second
    first = served(train_and_export(rows, tokenizer, epochs, OUT / "first"), tokenizer)
    rows += mined_rows(lambda texts: text_maxima(first, texts), OUT / "mined.jsonl")
    counts = Counter(f"{r['source']}/{r['label']}" for r in rows)
    log(f"{len(rows)} paragraphs: {dict(counts)}")
    out = train_and_export(rows, tokenizer, epochs, OUT)
    clf = served(out, tokenizer)
    threshold, flagged = choose_threshold(clf)
    log(f"threshold {threshold:.4f}; validation agent conversations flagged per kind: {flagged}")
    dev = dev_metrics(clf, threshold)
    log(f"development set: {dev}")
    files = {"model": f"{RELEASE}.onnx", "tokenizer": tokenizer.name, "heads": f"{RELEASE}-heads.npz"}
    for role, source in {
        "model": out / "model.onnx",
        "tokenizer": tokenizer,
        "heads": out / "heads.npz",
    }.items():
        if source != models_dir / files[role]:
            shutil.copyfile(source, models_dir / files[role])
    entry = {
        "version": VERSION,
        "format": (
            "classifiers/notes.py: per-token int8 ONNX encoder + npz linear head, one window per paragraph"
        ),
        "files": {role: {"file": f, "sha256": sha256_file(models_dir / f)} for role, f in files.items()},
        "categories": ["prompt_injection"],
        "thresholds": {"prompt_injection": threshold},
        "threshold_rule": (
            f"the lowest threshold, and no lower than {FLOOR}, at which no kind of the validation split's "
            f"real agent conversations (training/lib/agent_traffic.py) has more than {CONVERSATION_BUDGET} "
            "flagged through its tool outputs; scores from the serving path (asking paragraphs, max)"
        ),
        "validation_conversations_flagged": flagged,
        "development": dev,
        "training": {
            "base": f"{BASES[DEFAULT_BASE].source}, all {LAYERS} layers",
            "recipe": "python -m training.train_notes",
            "epochs": epochs,
            "lr": LR,
            "rows": dict(counts),
            "export": "torch 2.13.0 torch.onnx.export(dynamo=False, opset_version=17), per-token int8",
        },
    }
    publish_entry(entry, ARTIFACT, (ARTIFACT,), models_dir)
    log(f"wrote {files['model']}, {files['heads']} and the manifest entry {ARTIFACT!r} in {models_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument(
        "--models-dir", type=Path, default=MODELS_DIR, help="where the artifacts and the entry are written"
    )
    args = parser.parse_args(argv)
    return build(args.epochs, args.models_dir)


if __name__ == "__main__":
    sys.exit(main())
