"""The guard API's OpenAPI 3.1 description, served at `GET /openapi.json`.

Written by hand next to the endpoints it describes (`guard.py`); a test validates it
with `openapi-spec-validator` and checks real answers against its schemas.
"""

from __future__ import annotations

from typing import Any

_ITEMS = {"type": "array", "items": {"type": "object"}}
_CONVERSATION = {
    "messages": {**_ITEMS, "description": "The conversation in Chat Completions shape."},
    "input": {
        "oneOf": [{"type": "string"}, _ITEMS],
        "description": "The conversation in Responses shape (input items, or one user message).",
    },
    "instructions": {
        "type": "string",
        "description": "Responses `instructions` (scored as a system message).",
    },
    "tools": {**_ITEMS, "description": "Tool definitions, scored as untrusted content when they change."},
    "continuation_id": {
        "type": "string",
        "maxLength": 256,
        "description": "The `continuation_id` of the previous check: then send only the new items.",
    },
}

_VERDICT = {
    "type": "object",
    "required": [
        "decision",
        "categories",
        "category_scores",
        "continuation_id",
        "conversation_id",
        "tokens_scored",
        "latency_ms",
    ],
    "properties": {
        "decision": {"type": "string", "enum": ["allow", "flag", "block"]},
        "categories": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Flagged categories (and, on a block, those the conversation is refused for).",
        },
        "category_scores": {
            "type": "object",
            "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1},
            "description": "Conversation-level score per category.",
        },
        "continuation_id": {
            "type": "string",
            "description": "Continue from this check. After a block, continue from the previous one.",
        },
        "conversation_id": {"type": "string"},
        "tokens_scored": {
            "type": "integer",
            "minimum": 0,
            "description": "Tokens the classifiers processed.",
        },
        "latency_ms": {
            "type": "object",
            "required": ["total", "request"],
            "additionalProperties": {"type": "number"},
            "description": "`total` and per classifier (classifier time); `request` (the whole call).",
        },
        "locked": {
            "type": "object",
            "required": ["message"],
            "properties": {"message": {"type": "string"}},
            "description": "Present when the conversation is locked out: why, and until when.",
        },
    },
}

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "code", "message"],
            "properties": {
                "type": {"type": "string"},
                "code": {"type": "string"},
                "message": {"type": "string"},
                "param": {"type": ["string", "null"]},
            },
        }
    },
}


def _json(schema: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}


def _errors(*statuses: str) -> dict[str, Any]:
    return {
        s: {"description": "A refused request (the code says why).", "content": _json("Error")}
        for s in statuses
    }


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "DeltaGuard guard API",
        "version": "1.0.0",
        "description": (
            "Delta-only safety checks for any gateway: call the input check before the model "
            "and the output check after it. Without a continuation id, send the whole "
            "conversation every time (the prefix already scored is found by a hash chain); "
            "with one, send only the new items."
        ),
    },
    "servers": [{"url": "http://127.0.0.1:8400"}],
    "security": [{}, {"bearer": []}],
    "paths": {
        "/v1/guard/input": {
            "post": {
                "operationId": "checkInput",
                "summary": "Gate the conversation's new items before the model is called.",
                "requestBody": {"required": True, "content": _json("InputCheck")},
                "responses": {
                    "200": {"description": "The verdict.", "content": _json("Verdict")},
                    **_errors("400", "401", "404", "413"),
                },
            }
        },
        "/v1/guard/output": {
            "post": {
                "operationId": "checkOutput",
                "summary": "Score the model's answer; billing and output flags are queued.",
                "requestBody": {"required": True, "content": _json("OutputCheck")},
                "responses": {
                    "200": {
                        "description": "The verdict on the conversation with the answer.",
                        "content": _json("Verdict"),
                    },
                    **_errors("400", "401", "404", "409", "413"),
                },
            }
        },
        "/v1/guard/portkey": {
            "post": {
                "operationId": "portkeyWebhook",
                "summary": "Both checks as a Portkey AI gateway webhook guardrail (eventType picks one).",
                "requestBody": {"required": True, "content": _json("PortkeyWebhook")},
                "responses": {
                    "200": {"description": "Portkey's webhook verdict.", "content": _json("PortkeyVerdict")},
                    **_errors("400", "401", "409", "413"),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This description.",
                "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}},
            }
        },
    },
    "components": {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "Required when the gateway has tenant keys (DELTAGUARD_API_KEYS).",
            }
        },
        "schemas": {
            "InputCheck": {
                "type": "object",
                "description": "Exactly one of `messages` or `input`.",
                "properties": _CONVERSATION,
            },
            "OutputCheck": {
                "type": "object",
                "description": (
                    "The answer as exactly one of `output`, `message` or `response`, and the turn as "
                    "`continuation_id` (of its input check) or the conversation sent to the model."
                ),
                "properties": {
                    **_CONVERSATION,
                    "output": {**_ITEMS, "description": "Responses output items."},
                    "message": {"type": "object", "description": "The chat answer (`choices[0].message`)."},
                    "response": {
                        "type": "object",
                        "description": "The model's whole response: a chat completion or a Responses object.",
                    },
                    "usage": {
                        "type": "object",
                        "description": "The model's usage (either shape), billed; default: `response.usage`. "
                        "Each count must be a whole number from 0 to 10^9, else 400 `invalid_usage`.",
                    },
                },
            },
            "Verdict": _VERDICT,
            "PortkeyWebhook": {
                "type": "object",
                "required": ["eventType", "request"],
                "properties": {
                    "eventType": {"type": "string", "enum": ["beforeRequestHook", "afterRequestHook"]},
                    "request": {
                        "type": "object",
                        "required": ["json"],
                        "properties": {"json": {"type": "object"}},
                    },
                    "response": {"type": "object", "properties": {"json": {"type": "object"}}},
                },
            },
            "PortkeyVerdict": {
                "type": "object",
                "required": ["verdict", "data"],
                "properties": {"verdict": {"type": "boolean"}, "data": {"type": "object"}},
            },
            "Error": _ERROR,
        },
    },
}
