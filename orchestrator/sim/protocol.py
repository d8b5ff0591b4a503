"""The OpenAI request bodies the simulated engine accepts, validated as vLLM validates them.

Fields that only shape sampling (temperature, top_p, tools, reasoning_effort, ...) are checked for
type and range and otherwise accepted; unknown fields are allowed, as vLLM allows them. Anything
invalid becomes one `OrchestratorError` naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from orchestrator.core.errors import ErrorCode, OrchestratorError

BodyT = TypeVar("BodyT", bound=BaseModel)
NonNegInt = Annotated[StrictInt, Field(ge=0)]
PosInt = Annotated[StrictInt, Field(ge=1)]
Temperature = Annotated[float, Field(strict=True, ge=0.0, le=2.0)]
Unit = Annotated[float, Field(strict=True, gt=0.0, le=1.0)]
Penalty = Annotated[float, Field(strict=True, ge=-2.0, le=2.0)]
Stop = str | Annotated[list[str], Field(max_length=16)] | None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool | None = False
    continuous_usage_stats: StrictBool | None = False


class _Sampling(BaseModel):
    """Fields both endpoints share."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: PosInt | None = None
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    stop: Stop = None
    stop_token_ids: list[StrictInt] | None = None
    seed: StrictInt | None = None
    ignore_eos: StrictBool = False
    min_tokens: NonNegInt = 0
    n: Literal[1] = 1
    temperature: Temperature | None = None
    top_p: Unit | None = None
    top_k: StrictInt | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    user: str | None = None

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content)


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: PosInt | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: StrictBool | None = False

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: (
        str
        | Annotated[list[StrictInt], Field(min_length=1)]
        | Annotated[list[str], Field(min_length=1, max_length=1)]
    )
    echo: StrictBool | None = False
    logprobs: NonNegInt | None = None
    suffix: str | None = None

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    def prompt_text(self) -> str | None:
        if isinstance(self.prompt, str):
            return self.prompt
        if self.prompt and isinstance(self.prompt[0], str):
            return str(self.prompt[0])
        return None


Effort = Literal["low", "medium", "high"]


class ReasoningParam(BaseModel):
    model_config = ConfigDict(extra="allow")
    effort: Effort | None = None


class ResponsesRequest(BaseModel):
    """`POST /v1/responses`. `input` is text or a list of items (messages, function calls and
    their outputs, reasoning); they are counted, not validated one by one, as the model reads
    them whole. `seed`, `ignore_eos` and `min_tokens` are vLLM's sampling extras."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    input: str | Annotated[list[dict[str, Any]], Field(min_length=1)]
    instructions: str | None = None
    max_output_tokens: PosInt | None = None
    stream: StrictBool | None = False
    store: StrictBool | None = True
    background: StrictBool | None = False
    previous_response_id: str | None = None
    reasoning: ReasoningParam | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    seed: StrictInt | None = None
    ignore_eos: StrictBool = False
    min_tokens: NonNegInt = 0
    user: str | None = None


class TokenizeRequest(BaseModel):
    """vLLM's `/tokenize`: a `prompt`, or chat `messages` rendered with the chat template."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | None = None
    add_special_tokens: StrictBool = True
    return_token_strs: StrictBool | None = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    tokens: list[Annotated[StrictInt, Field(ge=0)]]


def _describe(error: ValidationError) -> tuple[str, str | None]:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"] if not str(part).startswith("function"))
    field = location.split(".")[0] if location else None
    message = f"{location}: {first['msg']}" if location else first["msg"]
    extra = len(error.errors()) - 1
    if extra:
        message += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return message, field


def parse_body(model: type[BodyT], body: Any) -> BodyT:
    """Validate a decoded JSON body; raise INVALID_ARGUMENT naming the first bad field."""
    if not isinstance(body, dict):
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT, "the request body must be a JSON object"
        )
    try:
        return model.model_validate(body)
    except ValidationError as error:
        message, field = _describe(error)
        raise OrchestratorError(ErrorCode.INVALID_ARGUMENT, message, param=field) from None
