"""The guard API's OpenAPI 3.1 description, served at `GET /openapi.json`.

Its schemas are the JSON schemas of the wire models the API validates requests with and
answers in (`guard_wire.py`, and the error object of `http_errors.py`): one source of
truth. Written here are only the operations: their paths, summaries and statuses. A test
validates the document with `openapi-spec-validator` and checks real answers against it.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from deltaguard.gateway.guard_wire import InputCheck, OutputCheck, PortkeyVerdict, PortkeyWebhook, Verdict
from deltaguard.gateway.http_errors import Error

_REF = "#/components/schemas/{model}"
# Requests as they are validated; answers as they are written.
_, _SCHEMAS = models_json_schema(
    [
        (InputCheck, "validation"),
        (OutputCheck, "validation"),
        (PortkeyWebhook, "validation"),
        (Verdict, "serialization"),
        (PortkeyVerdict, "serialization"),
        (Error, "serialization"),
    ],
    ref_template=_REF,
)


def _json(model: type) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}}


def _operation(operation_id: str, summary: str, body: type, answer: type, statuses: str) -> dict[str, Any]:
    """A POST that takes `body` and answers `answer`, or a refusal with one of `statuses`."""
    refused = {"description": "A refused request (the code says why).", "content": _json(Error)}
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "requestBody": {"required": True, "content": _json(body)},
            "responses": {
                "200": {"description": answer.__doc__.splitlines()[0], "content": _json(answer)},
                **dict.fromkeys(statuses.split(), refused),
            },
        }
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
        "/v1/guard/input": _operation(
            "checkInput",
            "Gate the conversation's new items before the model is called.",
            InputCheck,
            Verdict,
            "400 401 404 413",
        ),
        "/v1/guard/output": _operation(
            "checkOutput",
            "Score the model's answer; billing and output flags are queued.",
            OutputCheck,
            Verdict,
            "400 401 404 409 413",
        ),
        "/v1/guard/portkey": _operation(
            "portkeyWebhook",
            "Both checks as a Portkey AI gateway webhook guardrail (eventType picks one).",
            PortkeyWebhook,
            PortkeyVerdict,
            "400 401 409 413",
        ),
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
        "schemas": _SCHEMAS["$defs"],
    },
}
