"""The guard API's wire models: what its checks take and answer, validated and described by
the same classes (`guard_openapi` builds `GET /openapi.json` from them).

A request is validated whole (`validated`) before anything is looked up. A refusal names
the field at fault (`param`) with the codes the gateway uses everywhere: a field missing
is `missing_required_parameter`, of the wrong type `invalid_type`, out of range
`invalid_value`; a conversation or answer of the wrong shape is `invalid_item` (its items
are read by `deltaguard.chat_items`, which names the item at fault, `messages[3].content`).

>>> InputCheck.model_validate({"input": "hello"}).conversation_field
'input'
>>> validated(InputCheck, {"input": "hi", "tools": "t"}, max_id_length=256)
Traceback (most recent call last):
deltaguard.gateway.http_errors.RequestError: tools: Input should be a valid list
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from deltaguard.gateway.http_errors import RequestError
from deltaguard.usage import usage_problem

# The codes a validator below raises as its error type: the client sees them as they are.
_OWN_CODES = frozenset(
    {
        "invalid_item",
        "invalid_request",
        "invalid_type",
        "invalid_usage",
        "invalid_value",
        "missing_required_parameter",
    }
)
# pydantic's error types that are not the wrong type (every other one is `invalid_type`).
_CODES = {
    "missing": "missing_required_parameter",
    "string_too_long": "invalid_value",
    "literal_error": "invalid_value",
}


def _refusal(code: str, message: str, param: str) -> PydanticCustomError:
    """A refusal of the whole body that names its field (`param`); `code` is the client's."""
    return PydanticCustomError(code, "{message}", {"message": message, "param": param})


def _within_id_limit(value: str, info: ValidationInfo) -> str:
    limit = (info.context or {}).get("max_id_length")
    if limit is not None and len(value) > limit:
        raise PydanticCustomError("invalid_value", f"continuation_id is longer than {limit} characters")
    return value


def _leave_out(description: str) -> Any:
    """A field a body may leave out, but not send as null (its schema has no default)."""
    return Field(None, description=description, json_schema_extra=lambda schema: schema.pop("default"))


ContinuationId = Annotated[str, Field(min_length=1), AfterValidator(_within_id_limit)]


def _dict_or_none(value: Any) -> Any:
    """Portkey's answer is checked only when it is one: another shape is no answer."""
    return value if isinstance(value, dict) else None


class _Request(BaseModel):
    # Strict: JSON types as sent, nothing coerced. Fields other gateways add are ignored.
    model_config = ConfigDict(strict=True)
    # The code of every error at one of these fields, whatever pydantic calls it.
    field_codes: ClassVar[dict[str, str]] = {}


class _Conversation(_Request):
    """The conversation in either shape, its tools and instructions, or a continuation."""

    field_codes: ClassVar[dict[str, str]] = {
        "messages": "invalid_item",
        "input": "invalid_item",
        "continuation_id": "invalid_type",
    }

    messages: list[Any] = _leave_out("The conversation in Chat Completions shape.")
    input: str | list[Any] = _leave_out(
        "The conversation in Responses shape (input items, or one user message)."
    )
    instructions: str | None = Field(
        None, description="Responses `instructions` (scored as a system message)."
    )
    tools: list[dict[str, Any]] | None = Field(
        None, description="Tool definitions, scored as untrusted content when they change."
    )
    continuation_id: ContinuationId | None = Field(
        None,
        description="The `continuation_id` of the previous check: then send only the new items "
        "(at most the gateway's `max_id_length` characters, 256 by default).",
    )

    @property
    def conversation_field(self) -> str | None:
        """`messages` or `input`: the one the conversation was sent as (None: neither)."""
        sent = [k for k in ("messages", "input") if k in self.model_fields_set]
        return sent[0] if len(sent) == 1 else None

    def _one_conversation(self) -> None:
        sent = self.model_fields_set & {"messages", "input"}
        if len(sent) != 1:
            raise _refusal(
                "missing_required_parameter" if not sent else "invalid_request",
                "send the conversation as exactly one of messages (Chat Completions) or input (Responses)",
                "messages",
            )


class InputCheck(_Conversation):
    """Exactly one of `messages` or `input`."""

    @model_validator(mode="after")
    def _conversation(self) -> InputCheck:
        self._one_conversation()
        return self


class OutputCheck(_Conversation):
    """The answer as exactly one of `output`, `message` or `response`, and the turn as
    `continuation_id` (of its input check) or the conversation sent to the model."""

    field_codes: ClassVar[dict[str, str]] = {
        **_Conversation.field_codes,
        "output": "invalid_item",
        "message": "invalid_item",
        "response": "invalid_item",
    }

    output: list[Any] = _leave_out("Responses output items.")
    message: dict[str, Any] = _leave_out("The chat answer (`choices[0].message`).")
    response: dict[str, Any] = _leave_out(
        "The model's whole response: a chat completion or a Responses object."
    )
    usage: dict[str, Any] | None = Field(
        None,
        description="The model's usage (either shape), billed; default: `response.usage`. "
        "Each count must be a whole number from 0 to 10^9, else 400 `invalid_usage`.",
    )

    @field_validator("response")
    @classmethod
    def _a_response(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("choices"), list) and not isinstance(value.get("output"), list):
            raise PydanticCustomError(
                "invalid_item",
                "invalid answer: response: expected a chat completion (choices) "
                "or a Responses object (output)",
            )
        return value

    @property
    def answer_field(self) -> str:
        return next(k for k in ("output", "message", "response") if k in self.model_fields_set)

    @property
    def billed_usage(self) -> dict[str, Any] | None:
        """The usage to bill: as given, else the response's own."""
        if self.usage is not None or self.response is None:
            return self.usage
        return self.response.get("usage")

    @model_validator(mode="after")
    def _answer_and_turn(self) -> OutputCheck:
        given = self.model_fields_set & {"output", "message", "response"}
        if len(given) != 1:
            raise _refusal(
                "missing_required_parameter" if not given else "invalid_request",
                "send the model's answer as exactly one of output (Responses items), "
                "message (a chat message) or response (the model's whole response object)",
                "output",
            )
        usage = self.billed_usage
        if usage is not None and not isinstance(usage, dict):
            raise _refusal("invalid_type", "usage must be an object", "usage")
        problem = usage_problem(usage) if usage is not None else None
        if problem is not None:  # billed as given: refused rather than clamped or dropped
            raise _refusal("invalid_usage", problem, "usage")
        if self.continuation_id is None or self.model_fields_set & {"messages", "input"}:
            self._one_conversation()
        return self


class PortkeyRequest(_Request):
    body: dict[str, Any] = Field(alias="json", description="The request object the model is sent.")


class PortkeyResponse(_Request):
    body: Annotated[dict[str, Any] | None, BeforeValidator(_dict_or_none)] = Field(
        None, alias="json", description="The model's answer: a chat completion or a Responses object."
    )


class PortkeyWebhook(_Request):
    """A Portkey AI gateway webhook guardrail's call; `eventType` picks the check."""

    field_codes: ClassVar[dict[str, str]] = {"request": "invalid_type", "eventType": "invalid_value"}

    request: PortkeyRequest
    event_type: Literal["beforeRequestHook", "afterRequestHook"] = Field(alias="eventType")
    response: Annotated[PortkeyResponse | None, BeforeValidator(_dict_or_none)] = None


class Locked(BaseModel):
    message: str = Field(description="Why the conversation is locked out, and until when.")


class Latency(BaseModel):
    """`total` and per classifier (classifier time); `request` (the whole call), in ms."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, float] = Field(init=False)

    total: float
    request: float


class Verdict(BaseModel):
    """A check's answer: the decision on the conversation as of this check."""

    decision: Literal["allow", "flag", "block"]
    categories: list[str] = Field(
        description="Flagged categories (and, on a block, those the conversation is refused for)."
    )
    category_scores: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        description="Conversation-level score per category."
    )
    continuation_id: str = Field(
        description="Continue from this check. After a block, continue from the previous one."
    )
    conversation_id: str
    tokens_scored: int = Field(ge=0, description="Tokens the classifiers processed.")
    latency_ms: Latency
    locked: Locked | None = Field(
        None, description="Present when the conversation is locked out: why, and until when."
    )
    actions: list[str] | None = Field(
        None,
        description="An output check's tool calls that untrusted content told the model to make "
        "(the action check): one reason each. Their category joins `categories`.",
    )


class PortkeySkipped(BaseModel):
    decision: Literal["allow"] = "allow"
    skipped: str = Field(description="Why nothing was checked.")


class PortkeyVerdict(BaseModel):
    """Portkey's webhook answer: `verdict: false` fails the guardrail."""

    verdict: bool
    data: Verdict | PortkeySkipped


M = TypeVar("M", bound=_Request)


def validated(model: type[M], body: dict[str, Any], *, max_id_length: int) -> M:
    """`body` as a `model`, or the `RequestError` that refuses it (its first fault)."""
    try:
        return model.model_validate(body, context={"max_id_length": max_id_length})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        field = str(first["loc"][0]) if first["loc"] else None
        param = (first.get("ctx") or {}).get("param") or field
        if first["type"] in _OWN_CODES:
            raise RequestError(first["msg"], code=first["type"], param=param) from None
        code = model.field_codes.get(field or "") or _CODES.get(first["type"], "invalid_type")
        # A union's members each refuse the value: say all they would take.
        said = dict.fromkeys(e["msg"] for e in errors if e["loc"] and str(e["loc"][0]) == field)
        raise RequestError(f"{field}: {'; '.join(said)}", code=code, param=param) from None
