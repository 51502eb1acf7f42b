"""Adapters that attach DeltaGuard's safety stage to other gateways.

Each adapter module imports its host framework; importing this package does not (the
framework-free wire conversion is `deltaguard.chat_items`), so the core never depends on
an optional extra.

- `deltaguard.integrations.litellm`: a LiteLLM proxy guardrail (`pip install
  'deltaguard[litellm]'`); example config in `litellm_config.example.yaml` beside it.
"""
