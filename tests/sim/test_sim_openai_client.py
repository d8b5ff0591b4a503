"""The official `openai` client talks to a simulated replica exactly as it talks to vLLM."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import openai
import pytest
from replica_metrics import MODEL_NAME, metric_names, value
from replica_server import ReplicaThread

MAX_MODEL_LEN = 131_072
LONG_ENOUGH = {"ignore_eos": True}  # vLLM's switch: generate exactly max_tokens
HELLO = [{"role": "user", "content": "Say hello to the fleet."}]


def words(text: str) -> int:
    """Tokens in simulated output: every token is one vocabulary word with a leading space."""
    return len(text.split())


@pytest.fixture
def client(instant_replica: ReplicaThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{instant_replica.url}/v1", api_key="unused", max_retries=0)


def test_streamed_chat_arrives_in_chunks_and_its_usage_counts_the_streamed_tokens(
    client: openai.OpenAI,
) -> None:
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=HELLO,
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=LONG_ENOUGH,
    )
    chunks = list(stream)

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    usage = chunks[-1].usage
    assert len(chunks) > 2
    assert chunks[0].choices[0].delta.role == "assistant"
    assert content.strip()
    assert [f for f in finishes if f] == ["length"]
    assert chunks[-1].choices == []
    assert usage is not None
    assert usage.completion_tokens == 40 == words(content)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_async_client_streams_chat_and_text_completions(instant_replica: ReplicaThread) -> None:
    async def stream_both() -> tuple[str, int, str, int]:
        async with openai.AsyncOpenAI(
            base_url=f"{instant_replica.url}/v1", api_key="unused", max_retries=0
        ) as client:
            chat = await client.chat.completions.create(
                model=MODEL_NAME,
                messages=HELLO,
                max_tokens=25,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=LONG_ENOUGH,
            )
            chat_text, chat_usage = "", 0
            async for chunk in chat:
                if chunk.choices:
                    chat_text += chunk.choices[0].delta.content or ""
                if chunk.usage:
                    chat_usage = chunk.usage.completion_tokens
            text = await client.completions.create(
                model=MODEL_NAME,
                prompt="The fleet",
                max_tokens=15,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=LONG_ENOUGH,
            )
            text_text, text_usage = "", 0
            async for chunk in text:
                if chunk.choices:
                    text_text += chunk.choices[0].text
                if chunk.usage:
                    text_usage = chunk.usage.completion_tokens
            return chat_text, chat_usage, text_text, text_usage

    chat_text, chat_usage, text_text, text_usage = asyncio.run(stream_both())

    assert chat_usage == 25 == words(chat_text)
    assert text_usage == 15 == words(text_text)


def test_non_streaming_chat_returns_one_assistant_message_with_consistent_usage(
    client: openai.OpenAI,
) -> None:
    reply = client.chat.completions.create(model=MODEL_NAME, messages=HELLO, max_tokens=64)

    choice = reply.choices[0]
    assert reply.object == "chat.completion"
    assert reply.model == MODEL_NAME
    assert len(reply.choices) == 1
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens == words(choice.message.content) <= 64
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_non_streaming_text_completion_returns_text_with_consistent_usage(
    client: openai.OpenAI,
) -> None:
    reply = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=64)

    choice = reply.choices[0]
    assert reply.object == "text_completion"
    assert choice.text
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens == words(choice.text) <= 64
    assert reply.usage.prompt_tokens == 4  # 16 bytes at four bytes per token


def test_models_lists_gpt_oss_with_its_131k_context(client: openai.OpenAI) -> None:
    listed = client.models.list().data

    assert [m.id for m in listed] == [MODEL_NAME]
    assert listed[0].to_dict()["max_model_len"] == MAX_MODEL_LEN


def test_a_prompt_of_token_ids_counts_exactly_one_token_per_id(client: openai.OpenAI) -> None:
    ids = list(range(1, 1234))

    reply = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=1)

    assert reply.usage.prompt_tokens == len(ids)


@pytest.mark.parametrize("max_tokens", [1, 7, 300])
def test_ignore_eos_generates_exactly_max_tokens_and_ends_by_length(
    client: openai.OpenAI, max_tokens: int
) -> None:
    chat = client.chat.completions.create(
        model=MODEL_NAME, messages=HELLO, max_tokens=max_tokens, extra_body=LONG_ENOUGH
    )
    text = client.completions.create(
        model=MODEL_NAME, prompt="go", max_tokens=max_tokens, extra_body=LONG_ENOUGH
    )

    for usage, choice_text, finish in (
        (chat.usage, chat.choices[0].message.content, chat.choices[0].finish_reason),
        (text.usage, text.choices[0].text, text.choices[0].finish_reason),
    ):
        assert usage.completion_tokens == max_tokens == words(choice_text)
        assert finish == "length"


def test_the_same_seed_writes_the_same_text_and_another_seed_writes_other_text(
    client: openai.OpenAI,
) -> None:
    def write(seed: int) -> str:
        reply = client.chat.completions.create(
            model=MODEL_NAME, messages=HELLO, max_tokens=30, seed=seed, extra_body=LONG_ENOUGH
        )
        return reply.choices[0].message.content

    assert write(11) == write(11)
    assert write(11) != write(12)


def test_a_stop_string_ends_generation_and_never_appears_in_the_output(
    client: openai.OpenAI,
) -> None:
    reply = client.completions.create(
        model=MODEL_NAME, prompt="go", max_tokens=500, stop=["the"], seed=3, extra_body=LONG_ENOUGH
    )
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=HELLO,
        max_tokens=500,
        stop="the",
        seed=3,
        stream=True,
        extra_body=LONG_ENOUGH,
    )
    chunks = [c for c in stream if c.choices]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)

    assert "the" not in reply.choices[0].text
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens < 500
    assert "the" not in streamed
    assert chunks[-1].choices[0].finish_reason == "stop"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        return json.loads(response.read())


def test_sglang_style_model_and_server_info_answer_json(instant_replica: ReplicaThread) -> None:
    model_info = get_json(f"{instant_replica.url}/get_model_info")
    server_info = get_json(f"{instant_replica.url}/get_server_info")

    assert model_info["model_path"] == MODEL_NAME
    assert model_info["is_generation"] is True
    assert server_info["served_model_name"] == MODEL_NAME
    assert server_info["context_length"] == MAX_MODEL_LEN
    assert server_info["generation"] == "MI355X"


VLLM_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
)


def test_metrics_use_vllm_names(instant_replica: ReplicaThread) -> None:
    assert set(VLLM_METRICS) <= metric_names(instant_replica.url)


def test_metrics_count_the_tokens_and_latencies_of_a_served_request(
    instant_replica: ReplicaThread, client: openai.OpenAI
) -> None:
    url = instant_replica.url
    counted = (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
    )
    before = {name: value(url, name) for name in counted}
    finished_before = value(url, "vllm:request_success_total", finished_reason="length")

    client.completions.create(
        model=MODEL_NAME, prompt=list(range(100)), max_tokens=20, extra_body=LONG_ENOUGH
    )

    moved = {name: value(url, name) - before[name] for name in counted}
    assert moved["vllm:prompt_tokens_total"] == 100
    assert moved["vllm:generation_tokens_total"] == 20
    assert moved["vllm:time_to_first_token_seconds_count"] == 1
    assert moved["vllm:inter_token_latency_seconds_count"] == 19
    assert moved["vllm:e2e_request_latency_seconds_count"] == 1
    assert value(url, "vllm:request_success_total", finished_reason="length") == finished_before + 1
    assert value(url, "vllm:num_requests_running") == 0
