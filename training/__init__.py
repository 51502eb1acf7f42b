"""Training recipes: build-time only, never installed with the runtime."""
