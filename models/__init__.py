"""Trained model artifacts and their manifest (manifest.json); see models/README.md."""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
