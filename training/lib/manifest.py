"""Writing one entry of models/manifest.json.

Read-modify-write of one key only, replaced atomically so that readers (running tests, a
serving process) never see half a file. No deltaguard import at module level: the build
venv imports the recipes that use this without the runtime installed.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def write_manifest_entry(entry: dict, name: str, models_dir: Path = MODELS_DIR) -> None:
    """Set the manifest's `models[name]` to `entry`, leaving every other key as it was."""
    from deltaguard.artifacts import MANIFEST_NAME

    path = models_dir / MANIFEST_NAME
    manifest = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"models": {}}
    manifest.setdefault("models", {})[name] = entry
    fd, tmp = tempfile.mkstemp(dir=models_dir, prefix=".manifest.", suffix=".json")
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)
