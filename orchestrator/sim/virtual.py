"""Virtual time: drive a `SimBatcher` through a list of arrivals with no sockets and no sleeping.

Time jumps from one step's end to the next (or to the next arrival when the replica is idle), so a
replica's ten minutes take well under a second of CPU when the batch is large.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest


@dataclass(frozen=True, slots=True)
class VirtualRun:
    """Finished requests and the step timeline of one virtual run.

    `step_end_s[i]` and `tokens_out[i]` give the cumulative output tokens at the end of step i.
    `backlog_cleared_s` is the end of the last step that left requests waiting (0 if none did):
    until then the replica ran saturated.
    """

    requests: Sequence[SimRequest]
    end_s: float
    steps: int
    step_end_s: Sequence[float]
    tokens_out: Sequence[int]
    preemptions: int
    backlog_cleared_s: float

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)

    def ttfts_s(self) -> list[float]:
        return [r.first_token_s - r.arrival_s for r in self.requests if r.first_token_s is not None]

    def tpots_s(self) -> list[float]:
        """Per-request time per output token after the first (MLPerf's TPOT)."""
        return [
            (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
            for r in self.requests
            if r.output_tokens > 1 and r.finish_s is not None and r.first_token_s is not None
        ]

    def throughput_between(self, start_s: float, end_s: float) -> float:
        """Output tokens/s over [start_s, end_s], read off the step timeline."""
        lo = bisect.bisect_left(self.step_end_s, start_s)
        hi = bisect.bisect_right(self.step_end_s, end_s) - 1
        if hi <= lo:
            return 0.0
        elapsed = self.step_end_s[hi] - self.step_end_s[lo]
        return (self.tokens_out[hi] - self.tokens_out[lo]) / elapsed


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by the nearest-rank method, as LoadGen reports them."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def run_virtual(batcher: SimBatcher, arrivals: Sequence[SimRequest]) -> VirtualRun:
    """Serve `arrivals` (sorted by `arrival_s`) until every request has finished."""
    pending = sorted(arrivals, key=lambda r: r.arrival_s)
    now = pending[0].arrival_s if pending else 0.0
    index = 0
    tokens = 0
    preemptions = 0
    backlog_cleared_s = 0.0
    step_end: list[float] = []
    tokens_out: list[int] = []
    while index < len(pending) or batcher.has_work:
        while index < len(pending) and pending[index].arrival_s <= now:
            batcher.submit(pending[index])
            index += 1
        if not batcher.has_work:
            now = pending[index].arrival_s
            continue
        plan = batcher.plan_step()
        if plan.work.tokens == 0:
            raise RuntimeError("the batcher has work but scheduled nothing: the model is stuck")
        now += plan.duration_s
        outcome = batcher.finish_step(now)
        tokens += outcome.tokens_generated
        preemptions += len(outcome.preempted)
        if batcher.num_waiting:
            backlog_cleared_s = now
        step_end.append(now)
        tokens_out.append(tokens)
    return VirtualRun(
        pending, now, len(step_end), step_end, tokens_out, preemptions, backlog_cleared_s
    )
