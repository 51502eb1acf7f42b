"""Writing models/manifest.json: the one writer every recipe goes through.

Read-modify-write of the keys a recipe owns only, replaced atomically so that readers
(running tests, a serving process) never see half a file. No deltaguard import at module
level: the build venv imports the recipes that use this without the runtime installed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def update_manifest(edit: Callable[[dict], None], models_dir: Path = MODELS_DIR) -> None:
    """Apply `edit` to the manifest's `models` mapping in place, and write the manifest back
    (two-space indented JSON, a trailing newline), leaving every key `edit` leaves alone."""
    from deltaguard.artifacts import MANIFEST_NAME

    models_dir = Path(models_dir)
    path = models_dir / MANIFEST_NAME
    manifest = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"models": {}}
    edit(manifest.setdefault("models", {}))
    fd, tmp = tempfile.mkstemp(dir=models_dir, prefix=".manifest.", suffix=".json")
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def write_manifest_entry(entry: dict, name: str, models_dir: Path = MODELS_DIR) -> None:
    """Set the manifest's `models[name]` to `entry`, leaving every other key as it was."""
    update_manifest(lambda models: models.__setitem__(name, entry), models_dir)
