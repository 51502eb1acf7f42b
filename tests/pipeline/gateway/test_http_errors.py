from __future__ import annotations

import json

from deltaguard.errors import SafetyBlocked
from deltaguard.gateway.http_errors import error_response, unauthorized


def test_a_refusal_is_the_error_object_with_its_status():
    response = error_response(SafetyBlocked(["secrets"]))
    assert response.status_code == 400
    error = json.loads(response.body)["error"]
    assert error["code"] == "safety_blocked" and error["categories"] == ["secrets"]
    assert error["type"] == "invalid_request_error" and error["param"] is None


def test_an_unknown_key_is_a_401_authentication_error_each_time_new():
    first, second = unauthorized(), unauthorized()
    assert first is not second
    response = error_response(first)
    assert response.status_code == 401
    assert json.loads(response.body)["error"] == {
        "type": "authentication_error",
        "code": "invalid_api_key",
        "message": "Incorrect API key provided.",
        "param": None,
    }
