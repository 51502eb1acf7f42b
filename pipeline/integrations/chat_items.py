"""Kept so that `deltaguard.integrations.chat_items` imports keep working: the chat and
Responses wire shapes are read by `deltaguard.chat_items`, below every adapter."""

from __future__ import annotations

from deltaguard.chat_items import (
    ItemCache,
    chat_history_items,
    chat_message_wire,
    chat_output_items,
    responses_history_items,
    responses_output_items,
)

__all__ = [
    "ItemCache",
    "chat_history_items",
    "chat_message_wire",
    "chat_output_items",
    "responses_history_items",
    "responses_output_items",
]
