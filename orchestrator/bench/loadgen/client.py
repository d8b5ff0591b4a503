"""Streaming clients for one query: OpenAI chat completions over HTTP (SSE), or the gRPC
`RouterService.Generate` stream. Each reports the first token as it arrives and the count of
output tokens, and says which replica (and pool, when the transport tells) served it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import grpc

from orchestrator._proto.orchestrator.router.v1 import router_pb2, router_pb2_grpc
from orchestrator.bench.loadgen.dataset import Sample

MODEL = "openai/gpt-oss-120b"
REPLICA_HEADER = "x-orchestrator-replica"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one query produced; times are `time.perf_counter()` seconds."""

    sent_s: float
    first_token_s: float | None
    done_s: float
    output_tokens: int
    replica: str
    pool: str
    error: str | None = None


FirstToken = Callable[[], None]


class StreamClient(Protocol):
    async def stream(self, sample: Sample, on_first_token: FirstToken) -> Outcome: ...

    async def close(self) -> None: ...


class HttpClient:
    """POST /v1/chat/completions with `stream: true`; counts content events as tokens."""

    def __init__(self, endpoint: str, model: str = MODEL, timeout_s: float = 3600.0) -> None:
        self.url = endpoint.rstrip("/") + "/v1/chat/completions"
        self.model = model
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            connector=aiohttp.TCPConnector(limit=0),
        )

    async def stream(self, sample: Sample, on_first_token: FirstToken) -> Outcome:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": sample.prompt()}],
            "max_tokens": sample.output_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        sent = time.perf_counter()
        first: float | None = None
        usage_tokens: int | None = None
        events = 0
        async with self._session.post(self.url, json=body) as response:
            replica = response.headers.get(REPLICA_HEADER, "")
            if response.status != 200:
                text = await response.text()
                return Outcome(sent, None, time.perf_counter(), 0, replica, "", text[:300])
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                event = json.loads(line[5:])
                if event.get("usage"):
                    usage_tokens = int(event["usage"]["completion_tokens"])
                choices = event.get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    events += 1
                    if first is None:
                        first = time.perf_counter()
                        on_first_token()
        tokens = usage_tokens if usage_tokens is not None else events
        return Outcome(sent, first, time.perf_counter(), tokens, replica, "")

    async def close(self) -> None:
        await self._session.close()


class GrpcClient:
    """`RouterService.Generate`: a stream of text deltas with the serving replica and pool."""

    def __init__(self, target: str, model: str = MODEL) -> None:
        self.model = model
        self._channel = grpc.aio.insecure_channel(target.removeprefix("grpc://"))
        self._stub: Any = router_pb2_grpc.RouterServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def stream(self, sample: Sample, on_first_token: FirstToken) -> Outcome:
        request = router_pb2.GenerateRequest(
            model=self.model,
            messages=[router_pb2.ChatMessage(role="user", content=sample.prompt())],
            max_tokens=sample.output_tokens,
            ignore_eos=True,
        )
        sent = time.perf_counter()
        first: float | None = None
        tokens, replica, pool = 0, "", ""
        try:
            async for reply in self._stub.Generate(request):
                if reply.replica.id:
                    replica, pool = reply.replica.id, reply.replica.pool
                if reply.text and first is None:
                    first = time.perf_counter()
                    on_first_token()
                tokens = max(tokens, reply.completion_tokens)  # a running count
        except grpc.aio.AioRpcError as error:
            detail = f"{error.code().name}: {error.details()}"
            return Outcome(sent, first, time.perf_counter(), tokens, replica, pool, detail)
        return Outcome(sent, first, time.perf_counter(), tokens, replica, pool)

    async def close(self) -> None:
        await self._channel.close()
