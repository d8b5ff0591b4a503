"""The LoadGen system under test: each issued query becomes one stream on an asyncio loop.

LoadGen calls `issue` from its own thread; the query runs on the SUT's event loop thread, which
calls `FirstTokenComplete` when the first token arrives and `QuerySamplesComplete` (with the
output token count) when the stream ends. In Offline, LoadGen issues every query at once; the
SUT keeps at most `max_in_flight` streams open, as an Offline harness keeps its queue full
without flooding the endpoint.
"""

from __future__ import annotations

import array
import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import mlperf_loadgen as lg

from orchestrator.bench.loadgen.client import Outcome, StreamClient
from orchestrator.bench.loadgen.dataset import Dataset


@dataclass(slots=True)
class Progress:
    issued: int = 0
    first_tokens: int = 0
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    outcomes: list[Outcome] = field(default_factory=list)


class StreamingSut:
    """Runs queries on a private event loop; thread-safe counters for the progress bar."""

    def __init__(
        self,
        dataset: Dataset,
        make_client: Callable[[], StreamClient],
        *,
        max_in_flight: int | None = None,
    ) -> None:
        self.dataset = dataset
        self.progress = Progress()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client: StreamClient = asyncio.run_coroutine_threadsafe(
            self._make(make_client), self._loop
        ).result(30)
        self._limit = asyncio.run_coroutine_threadsafe(
            self._semaphore(max_in_flight), self._loop
        ).result(30)
        self._tasks: set[concurrent.futures.Future[None]] = set()

    @staticmethod
    async def _make(make_client: Callable[[], StreamClient]) -> StreamClient:
        return make_client()

    @staticmethod
    async def _semaphore(limit: int | None) -> asyncio.Semaphore | None:
        return asyncio.Semaphore(limit) if limit else None

    # -- LoadGen callbacks (LoadGen's threads) ---------------------------------------------------

    def issue(self, queries: Sequence[lg.QuerySample]) -> None:
        for query in queries:
            future = asyncio.run_coroutine_threadsafe(self._run(query.id, query.index), self._loop)
            with self._lock:
                self.progress.issued += 1
                self._tasks.add(future)
            future.add_done_callback(self._forget)

    def flush(self) -> None:
        """Nothing is batched on our side."""

    def _forget(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._tasks.discard(future)

    # -- one query (the SUT's loop) ----------------------------------------------------------

    async def _run(self, query_id: int, index: int) -> None:
        if self._limit is None:
            await self._query(query_id, index)
            return
        async with self._limit:
            await self._query(query_id, index)

    async def _query(self, query_id: int, index: int) -> None:
        sample = self.dataset.samples[index]
        first_token = array.array("i", [0])

        def on_first_token() -> None:
            address, _ = first_token.buffer_info()
            response = lg.QuerySampleResponse(query_id, address, first_token.itemsize, 1)
            lg.FirstTokenComplete([response])
            with self._lock:
                self.progress.first_tokens += 1

        try:
            outcome = await self._client.stream(sample, on_first_token)
        except Exception as error:  # a broken stream still completes the query, as a failure
            outcome = Outcome(0.0, None, 0.0, 0, "", "", f"{type(error).__name__}: {error}")
        tokens = array.array("i", [0] * max(1, outcome.output_tokens))
        address, _ = tokens.buffer_info()
        response = lg.QuerySampleResponse(
            query_id, address, tokens.itemsize * len(tokens), max(1, outcome.output_tokens)
        )
        if outcome.first_token_s is None:
            on_first_token()  # LoadGen needs one per query with token latencies on
        lg.QuerySamplesComplete([response])
        with self._lock:
            progress = self.progress
            progress.completed += 1
            progress.failed += outcome.error is not None
            progress.output_tokens += outcome.output_tokens
            progress.outcomes.append(outcome)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._client.close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
