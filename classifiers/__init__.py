"""DeltaGuard classifiers: incremental folds over conversation items (see base.py)."""
