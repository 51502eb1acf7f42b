"""Test support: tansu brokers, worker processes, the LiteLLM proxy, free ports."""
