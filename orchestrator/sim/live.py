"""Live time: run a `SimBatcher` against the wall clock, stretched by `time_scale`.

Each step sleeps its simulated duration times `time_scale` (0 runs steps back to back, the
zero-latency mode benchmarks use). Sleeps aim at a running deadline, so the small overshoot of
every `asyncio.sleep` does not add up and a saturated replica keeps its calibrated throughput.
A host too busy to keep up (a stall longer than `MAX_CATCH_UP_S`) loses the excess rather than
bursting it back; the lost time is counted, so a slow figure can be told from a starved host.
Waiters learn of progress through one event per step instead of one wake-up per token.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from orchestrator.core.clock import Clock, MonotonicClock
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.metrics import EngineGauges, SimEngineMetrics
from orchestrator.sim.sequences import SimRequest, StepOutcome

MAX_CATCH_UP_S = 0.25


class LiveEngine:
    """One simulated replica serving requests in (scaled) wall time."""

    def __init__(
        self,
        batcher: SimBatcher,
        *,
        model_name: str,
        time_scale: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        if time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {time_scale}")
        self.batcher = batcher
        self.time_scale = time_scale
        self.clock = clock or MonotonicClock()
        self.metrics = SimEngineMetrics(model_name, self._gauges)
        self._reasons: dict[int, str] = {}
        self._done: dict[int, asyncio.Future[None]] = {}
        self._work = asyncio.Event()
        self._step_done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _gauges(self) -> EngineGauges:
        b = self.batcher
        return EngineGauges(b.num_running, b.num_waiting, b.kv_usage)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for future in self._done.values():
            if not future.done():
                future.cancel()

    # -- requests ------------------------------------------------------------------------------

    def submit(self, prompt_tokens: int, output_tokens: int, finish_reason: str) -> SimRequest:
        """Queue a request; `finish_reason` is what its end will be reported as."""
        request = SimRequest(prompt_tokens, output_tokens, self.clock.now())
        self.batcher.submit(request)
        self._reasons[request.request_id] = finish_reason
        self._done[request.request_id] = asyncio.get_running_loop().create_future()
        self._work.set()
        return request

    async def wait_finished(self, request: SimRequest) -> None:
        future = self._done.get(request.request_id)
        if future is not None:
            await asyncio.shield(future)

    async def token_counts(self, request: SimRequest) -> AsyncIterator[int]:
        """Yield the request's generated-token count each time it grows, until it finishes."""
        seen = 0
        while True:
            count = self.batcher.generated_tokens(request)
            if count > seen:
                seen = count
                yield count
            if request.finished:
                return
            await self._step_done.wait()

    def abort(self, request: SimRequest) -> None:
        """Cancel a request (the client went away); frees its KV at once."""
        if request.finished:
            return
        self.batcher.abort(request)
        self.metrics.finished["abort"] += 1
        self._forget(request)

    def _forget(self, request: SimRequest) -> None:
        self._reasons.pop(request.request_id, None)
        future = self._done.pop(request.request_id, None)
        if future is not None and not future.done():
            future.set_result(None)

    # -- the step loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        last_step_end = self.clock.now()
        while True:
            if not self.batcher.has_work:
                self._work.clear()
                await self._work.wait()
                deadline = loop.time()
                last_step_end = self.clock.now()
                continue
            plan = self.batcher.plan_step()
            earliest = loop.time() - MAX_CATCH_UP_S
            if earliest > deadline:
                self.metrics.behind_seconds += earliest - deadline
                deadline = earliest
            deadline += plan.duration_s * self.time_scale
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            now = self.clock.now()
            outcome = self.batcher.finish_step(now)
            self._record(plan.work.decode_sequences, now - last_step_end, outcome, now)
            last_step_end = now
            step_done, self._step_done = self._step_done, asyncio.Event()
            step_done.set()

    def _record(self, decoded: int, step_s: float, outcome: StepOutcome, now: float) -> None:
        metrics = self.metrics
        metrics.generation_tokens += outcome.tokens_generated
        metrics.preemptions += len(outcome.preempted)
        metrics.inter_token.observe(step_s, decoded)
        for request in outcome.first_tokens:
            metrics.prompt_tokens += request.prompt_tokens
            metrics.ttft.observe(now - request.arrival_s)
        for request in outcome.finished:
            metrics.e2e.observe(now - request.arrival_s)
            if request.output_tokens > 1 and request.first_token_s is not None:
                metrics.time_per_output_token.observe(
                    (now - request.first_token_s) / (request.output_tokens - 1)
                )
            reason = self._reasons.get(request.request_id, "length")
            metrics.finished[reason] = metrics.finished.get(reason, 0) + 1
            self._forget(request)
