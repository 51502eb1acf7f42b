"""Model artifacts: the manifest in models/manifest.json and hash-checked loading.

Every artifact a classifier loads is listed in the manifest with its sha256; a missing
file or a wrong hash is a `ModelArtifactError` at startup, never a weaker pipeline.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from deltaguard.errors import ModelArtifactError
from deltaguard.models import MODELS_DIR

MANIFEST_NAME = "manifest.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_manifest(models_dir: Path = MODELS_DIR) -> dict[str, Any]:
    path = models_dir / MANIFEST_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelArtifactError(f"model manifest not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ModelArtifactError(f"model manifest {path} is not valid JSON: {exc}") from exc


def manifest_entry(name: str, models_dir: Path = MODELS_DIR) -> dict[str, Any]:
    entries = load_manifest(models_dir).get("models", {})
    if name not in entries:
        raise ModelArtifactError(f"model {name!r} is not in {models_dir / MANIFEST_NAME}")
    return entries[name]


def checked_file(name: str, path: Path, sha256: str) -> Path:
    """`path`, after checking that it exists and has the sha256 the manifest gives it."""
    if not path.is_file():
        raise ModelArtifactError(f"model {name!r}: artifact {path} is missing")
    actual = sha256_file(path)
    if actual != sha256:
        raise ModelArtifactError(
            f"model {name!r}: artifact {path} has sha256 {actual}, manifest says {sha256}"
        )
    return path


def verified_path(name: str, models_dir: Path = MODELS_DIR) -> tuple[Path, dict[str, Any]]:
    """The artifact file of manifest entry `name`, after checking its sha256."""
    entry = manifest_entry(name, models_dir)
    return checked_file(name, models_dir / entry["file"], entry["sha256"]), entry
