from __future__ import annotations

import json

from deltaguard.errors import ItemError
from deltaguard.gateway.http_errors import (
    Error,
    RequestError,
    error_event,
    error_response,
    invalid_item,
    unauthorized,
    upstream_failed,
)


def test_a_refusal_is_the_error_object_with_its_status():
    err = RequestError("blocked", code="safety_blocked", detail={"categories": ["secrets"]})
    response = error_response(err)
    assert response.status_code == 400
    error = json.loads(response.body)["error"]
    assert error == {
        "type": "invalid_request_error",
        "code": "safety_blocked",
        "message": "blocked",
        "param": None,
        "categories": ["secrets"],
    }
    Error.model_validate(json.loads(response.body))  # the model the OpenAPI description names


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


def test_an_error_event_carries_the_same_object_and_the_status():
    err = upstream_failed("upstream sent nothing for 5 s")
    assert error_event(err, 7) == {
        "type": "error",
        "error": {
            "type": "server_error",
            "code": "upstream_error",
            "message": "upstream sent nothing for 5 s",
            "param": None,
        },
        "status": 502,
        "sequence_number": 7,
    }


def test_an_item_of_the_wrong_shape_names_its_field():
    err = invalid_item(ItemError("messages[2].content", "expected a string"), "message")
    assert (err.code, err.param, err.status) == ("invalid_item", "messages[2].content", 400)
    assert err.message == "invalid message: messages[2].content: expected a string"


def test_a_refusal_that_is_not_the_gateways_own_is_passed_through_as_it_came():
    body = {"error": {"message": "no such model", "type": "invalid_request_error", "code": "model_not_found"}}
    err = RequestError("upstream answered 404", code="upstream_refused", status=404, body=body)
    response = error_response(err)
    assert response.status_code == 404 and json.loads(response.body) == body
    assert err.to_error() == body["error"]


def test_a_response_that_failed_after_it_began_carries_the_hosted_apis_error_shape():
    """`response.failed`'s `response.error` is a code and a message, as the hosted API's."""
    err = upstream_failed("upstream stream ended before response.completed")
    assert err.to_response_error() == {
        "code": "upstream_error",
        "message": "upstream stream ended before response.completed",
    }
