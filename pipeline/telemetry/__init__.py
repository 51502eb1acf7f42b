"""Metrics and tracing of the lanes."""
