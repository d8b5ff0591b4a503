"""The official `openai` client talks to the router exactly as it talks to one vLLM server, while
the router spreads the requests over two replicas of different generations."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from router_harness import MODEL, RouterThread

HELLO = [{"role": "user", "content": "Say hello to the fleet."}]
EXACT = {"ignore_eos": True}  # vLLM's switch: generate exactly max_tokens


@pytest.fixture
def client(pair_router: RouterThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{pair_router.url}/v1", api_key="unused", max_retries=0)


def test_models_lists_the_model_of_the_routing_table(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]


def test_a_chat_completion_comes_back_whole_with_its_usage(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=12, extra_body=EXACT
    )

    assert reply.object == "chat.completion"
    assert reply.choices[0].finish_reason == "length"
    assert len((reply.choices[0].message.content or "").split()) == 12
    assert reply.usage is not None and reply.usage.completion_tokens == 12


def test_a_streamed_chat_arrives_in_chunks_and_ends_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=30,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=EXACT,
    )
    chunks = list(stream)

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 3
    assert len(content.split()) == 30
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 30


def test_a_text_completion_works_whole_and_streamed(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt="Once", max_tokens=8, extra_body=EXACT)
    streamed = list(
        client.completions.create(
            model=MODEL, prompt="Once", max_tokens=8, stream=True, extra_body=EXACT
        )
    )

    assert len(whole.choices[0].text.split()) == 8
    assert len("".join(c.choices[0].text for c in streamed if c.choices).split()) == 8


def test_the_async_client_streams_and_completes_concurrently(pair_router: RouterThread) -> None:
    async def run() -> tuple[list[int], list[int]]:
        async with openai.AsyncOpenAI(
            base_url=f"{pair_router.url}/v1", api_key="unused", max_retries=0
        ) as client:

            async def streamed() -> int:
                stream = await client.chat.completions.create(
                    model=MODEL, messages=HELLO, max_tokens=10, stream=True, extra_body=EXACT
                )
                text = "".join(
                    [c.choices[0].delta.content or "" async for c in stream if c.choices]
                )
                return len(text.split())

            async def whole() -> int:
                reply = await client.completions.create(
                    model=MODEL, prompt="Hi", max_tokens=10, extra_body=EXACT
                )
                return len(reply.choices[0].text.split())

            streams = asyncio.gather(*(streamed() for _ in range(20)))
            wholes = asyncio.gather(*(whole() for _ in range(20)))
            return list(await streams), list(await wholes)

    streams, wholes = asyncio.run(run())

    assert streams == [10] * 20
    assert wholes == [10] * 20


def test_concurrent_load_reaches_both_generations_and_leaves_nothing_in_flight(
    pair_router: RouterThread, client: openai.OpenAI
) -> None:
    def one(_: int) -> int:
        reply = client.completions.create(model=MODEL, prompt="Hi", max_tokens=64, extra_body=EXACT)
        return reply.usage.completion_tokens if reply.usage else 0

    with ThreadPoolExecutor(max_workers=16) as pool:
        tokens = list(pool.map(one, range(200)))

    assert tokens == [64] * 200
    for generation in ("MI355X", "MI300X"):
        assert pair_router.metric("orchestrator_router_decisions_total", generation=generation) > 0
    fleet = pair_router.service.fleet
    for replica_id in ("mi355x-0", "mi300x-0"):
        stats = fleet.stats(replica_id)
        assert stats is not None
        assert stats.in_flight == 0
        assert stats.started_total == stats.finished_total
    assert pair_router.metric("orchestrator_router_in_flight_requests") == 0


def test_unknown_models_raise_the_clients_not_found_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=4)

    assert "gpt-4o" in raised.value.message
