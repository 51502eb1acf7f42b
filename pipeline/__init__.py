"""DeltaGuard: a streaming safety-classifier pipeline that scores only each turn's delta."""
