"""The simulated replica continues an answer as vLLM does (`continue_final_message`, or a prompt
extended with the start of its own answer): given the first k tokens of what it writes for a
request and seed, it writes tokens k.. of the same text, counting the k given ones as prompt."""

from __future__ import annotations

import openai
import pytest
from replica_metrics import MODEL_NAME
from replica_server import ReplicaThread

QUESTION = [{"role": "user", "content": "Tell the fleet about capacity."}]
LIMIT = 40


@pytest.fixture
def client(instant_replica: ReplicaThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{instant_replica.url}/v1", api_key="unused", max_retries=0)


def streamed_chat(client: openai.OpenAI, **fields: object) -> tuple[list[tuple[str, str]], dict]:
    """The (reasoning, content) of each chunk with output, and the usage."""
    pieces, usage = [], {}
    stream = client.chat.completions.create(
        model=MODEL_NAME, stream=True, stream_options={"include_usage": True}, seed=11, **fields
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            piece = (extra.get("reasoning") or "", choice.delta.content or "")
            if piece != ("", ""):
                pieces.append(piece)
    return pieces, usage


@pytest.mark.parametrize("effort", [None, "low"])
def test_a_chat_continued_from_its_first_tokens_writes_the_rest_of_the_same_answer(
    client: openai.OpenAI, effort: str | None
) -> None:
    extra = {} if effort is None else {"reasoning_effort": effort}
    whole, usage = streamed_chat(client, messages=QUESTION, max_tokens=LIMIT, **extra)
    given = len(whole) // 2
    final = {"role": "assistant", "content": "".join(c for _, c in whole[:given])}
    reasoning = "".join(r for r, _ in whole[:given])
    if reasoning:
        final["reasoning"] = reasoning
    rest, rest_usage = streamed_chat(
        client,
        messages=[*QUESTION, final],
        max_tokens=LIMIT - given,
        extra_body={"continue_final_message": True, "add_generation_prompt": False, **extra},
    )
    assert rest == whole[given:]
    assert rest_usage["completion_tokens"] == usage["completion_tokens"] - given
    assert rest_usage["prompt_tokens"] == usage["prompt_tokens"] + given
    assert rest_usage["total_tokens"] == usage["total_tokens"]


def test_a_prompt_extended_with_the_answers_start_gets_the_rest_of_it(
    client: openai.OpenAI,
) -> None:
    prompt = "The router spreads"
    whole = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=LIMIT, seed=5)
    words = whole.choices[0].text.split(" ")[1:]
    start = "".join(" " + w for w in words[:10])
    rest = client.completions.create(
        model=MODEL_NAME, prompt=prompt + start, max_tokens=LIMIT - 10, seed=5
    )
    assert start + rest.choices[0].text == whole.choices[0].text
    assert whole.usage is not None and rest.usage is not None
    assert rest.usage.completion_tokens == whole.usage.completion_tokens - 10
    assert rest.usage.total_tokens == whole.usage.total_tokens


def test_continuing_and_adding_a_generation_prompt_together_is_refused(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError, match="continue_final_message"):
        client.chat.completions.create(
            model=MODEL_NAME,
            messages=[*QUESTION, {"role": "assistant", "content": " the"}],
            extra_body={"continue_final_message": True, "add_generation_prompt": True},
        )


def test_a_chat_with_tools_continued_in_its_reasoning_makes_the_call_the_whole_answer_makes(
    client: openai.OpenAI,
) -> None:
    schema = {"type": "object", "properties": {"site": {"type": "string"}}, "required": ["site"]}
    tools = [{"type": "function", "function": {"name": "capacity", "parameters": schema}}]
    fields = {"tools": tools, "reasoning_effort": "low", "seed": 11}
    whole = client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, **fields)  # type: ignore[call-overload]
    reasoning = (whole.choices[0].message.model_extra or {})["reasoning"]
    (call,) = whole.choices[0].message.tool_calls
    final = {"role": "assistant", "content": "", "reasoning": reasoning[: len(reasoning) // 2]}
    rest = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[*QUESTION, final],
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
        **fields,
    )
    (continued,) = rest.choices[0].message.tool_calls
    assert rest.choices[0].finish_reason == "tool_calls"
    assert (continued.function.name, continued.function.arguments) == (
        call.function.name,
        call.function.arguments,
    )
