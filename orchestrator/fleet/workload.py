"""Synthetic requests with the MLPerf gpt-oss-120b set's token-length statistics.

Lengths are log-normal, capped at the published maxima, with the location chosen so that the
*capped* mean equals the published mean. The spread (sigma) is an assumption stated in the data
file. Everything is deterministic for a seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from orchestrator.fleet.figures import WorkloadStats, load_figures


@dataclass(frozen=True, slots=True)
class OutputSplit:
    """One answer's output tokens: reasoning first, then the answer; both are output tokens."""

    reasoning_tokens: int
    answer_tokens: int

    @property
    def output_tokens(self) -> int:
        return self.reasoning_tokens + self.answer_tokens


def split_output(stats: WorkloadStats, output_tokens: int, effort: str | None) -> OutputSplit:
    """Split a length drawn from the workload (measured at `stats.reasoning.effort`) into
    reasoning and answer at `effort`; None means no reasoning channel (all of it is answer).

    The answer keeps its length at every effort (at least one token); the reasoning scales by
    the effort's factor, so higher effort means more output tokens for the same question.
    """
    reasoning = stats.reasoning
    if effort is None:
        return OutputSplit(0, output_tokens)
    factor = reasoning.effort_factor.get(effort)
    if factor is None:
        raise ValueError(
            f"unknown reasoning effort {effort!r}; known: {sorted(reasoning.effort_factor)}"
        )
    base = reasoning.effort_factor[reasoning.effort]
    thought_at_measured = min(output_tokens - 1, round(output_tokens * reasoning.share_at_low))
    answer = output_tokens - thought_at_measured
    return OutputSplit(max(1, round(thought_at_measured * factor / base)), answer)


@dataclass(frozen=True, slots=True)
class SampleLengths:
    input_tokens: int
    output_tokens: int


def _capped_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma)."""

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    log_cap = math.log(cap)
    below = math.exp(mu + sigma**2 / 2) * phi((log_cap - mu - sigma**2) / sigma)
    return below + cap * (1.0 - phi((log_cap - mu) / sigma))


def lognormal_location(mean: float, sigma: float, cap: float) -> float:
    """The mu whose log-normal, capped at `cap`, has mean `mean` (found by bisection)."""
    if not 1.0 <= mean < cap:
        raise ValueError(f"mean {mean} must lie in [1, cap={cap})")
    low, high = math.log(mean) - 5 * sigma, math.log(cap) + 5 * sigma
    for _ in range(100):
        mid = (low + high) / 2
        if _capped_lognormal_mean(mid, sigma, cap) < mean:
            low = mid
        else:
            high = mid
    return (low + high) / 2


class WorkloadSampler:
    """Draws (input, output) token lengths; the same seed gives the same sequence."""

    def __init__(self, stats: WorkloadStats | None = None, *, seed: int = 0) -> None:
        self.stats = stats or load_figures().workload
        self._random = random.Random(seed)
        s = self.stats
        self._input_mu = lognormal_location(s.mean_input_tokens, s.input_sigma, s.max_input_tokens)
        self._output_mu = lognormal_location(
            s.mean_output_tokens, s.output_sigma, s.max_output_tokens
        )

    def draw(self) -> SampleLengths:
        s = self.stats
        raw_in = self._random.lognormvariate(self._input_mu, s.input_sigma)
        return SampleLengths(
            input_tokens=max(1, min(s.max_input_tokens, round(raw_in))),
            output_tokens=self.output_length(self._random),
        )

    def output_length(self, rng: random.Random) -> int:
        """One output length drawn with `rng`: how long the model talks before its end token."""
        s = self.stats
        raw_out = rng.lognormvariate(self._output_mu, s.output_sigma)
        return max(1, min(s.max_output_tokens, round(raw_out)))

    def draw_many(self, count: int) -> list[SampleLengths]:
        return [self.draw() for _ in range(count)]

    def __iter__(self) -> Iterator[SampleLengths]:
        while True:
            yield self.draw()
