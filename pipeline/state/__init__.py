"""Conversation state and scoring: snapshots, the hash chain, the store, the policy."""
