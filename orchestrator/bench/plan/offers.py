"""What a plan is asked: demand, workload lengths, latency targets, and the GPUs on offer.

Pure data and parsing; `planner` searches over it. `SloTargets` is the planner's own pair of p99
targets until the per-class targets of the routing layer replace it (same two fields).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.bench.simulate.samples import stream_arrivals
from orchestrator.bench.virtual_fleet import Arrival
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation, parse_generation, spec_of
from orchestrator.fleet.figures import load_figures


def _invalid(message: str, param: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, message, param=param)


@dataclass(frozen=True, slots=True)
class SloTargets:
    """p99 time to first token and p99 time per output token a plan must meet, in seconds."""

    ttft_s: float
    tpot_s: float

    @classmethod
    def mlperf_server(cls) -> SloTargets:
        target = load_figures().workload.server_latency_p99
        return cls(target.ttft_s, target.tpot_s)


@dataclass(frozen=True, slots=True)
class Offer:
    """GPUs of one generation in one site: at most `max_gpus`, at `price_per_gpu_hour` if known.

    One replica is one GPU (GPT-OSS-120B fits on one). `watts_per_gpu` is the rated TDP.
    """

    generation: Generation
    site: str
    max_gpus: int
    price_per_gpu_hour: float | None = None

    @property
    def label(self) -> str:
        return f"{self.generation.value}@{self.site}"

    @property
    def watts_per_gpu(self) -> float:
        watts = spec_of(self.generation).tdp_watts
        if watts is None:
            raise _invalid(f"{self.generation.value} has no published TDP", "offer")
        return watts


DEFAULT_SITE = "local"
DEFAULT_MAX_GPUS = 64


def parse_offer(text: str) -> Offer:
    """`GEN[@SITE][:max=N][:price=P]`, e.g. `MI355X@us:max=16:price=4.10`."""
    head, *options = text.split(":")
    name, _, site = head.partition("@")
    try:
        generation = parse_generation(name.strip())
    except OrchestratorError as error:
        raise _invalid(f"--offer {text!r}: {error.message}", "offer") from None
    values: dict[str, str] = {}
    for option in options:
        key, equals, value = option.partition("=")
        if not equals or key not in ("max", "price") or key in values:
            raise _invalid(
                f"--offer {text!r}: expected GEN[@SITE][:max=N][:price=P], got {option!r}",
                "offer",
            )
        values[key] = value
    try:
        max_gpus = int(values.get("max", DEFAULT_MAX_GPUS))
        price = float(values["price"]) if "price" in values else None
    except ValueError:
        message = f"--offer {text!r}: max must be a whole number, price a number"
        raise _invalid(message, "offer") from None
    if max_gpus < 1 or (price is not None and not price >= 0):
        raise _invalid(f"--offer {text!r}: max must be >= 1 and price >= 0", "offer")
    return Offer(generation, site.strip() or DEFAULT_SITE, max_gpus, price)


@dataclass(frozen=True, slots=True)
class Workload:
    """Request lengths: the MLPerf set's (seeded draws) or a list read from a file, cycled."""

    lengths: Sequence[tuple[int, int]] = ()  # (prompt, output) tokens; empty = MLPerf's
    source: str = "MLPerf gpt-oss-120b lengths"

    @property
    def mean_output_tokens(self) -> float:
        if not self.lengths:
            return load_figures().workload.mean_output_tokens
        return sum(o for _, o in self.lengths) / len(self.lengths)

    def arrivals(self, seed: int, rate_per_s: float, duration_s: float) -> Iterator[Arrival]:
        """Poisson arrivals at `rate_per_s` over [0, duration_s], the same for a seed."""
        if not self.lengths:
            yield from stream_arrivals(seed, rate_per_s, duration_s)
            return
        gaps = random.Random(seed * 7919 + 1)
        picks = random.Random(seed)
        now = 0.0
        while True:
            now += gaps.expovariate(rate_per_s)
            if now > duration_s:
                return
            prompt, output = self.lengths[picks.randrange(len(self.lengths))]
            yield Arrival(now, prompt, output)


def read_lengths(path: Path) -> Workload:
    """One request per line: `PROMPT_TOKENS OUTPUT_TOKENS` (space or comma); `#` comments."""
    lengths: list[tuple[int, int]] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise _invalid(f"--lengths: cannot read {path}: {error.strerror}", "lengths") from None
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].replace(",", " ").split()
        if not text:
            continue
        try:
            prompt, output = (int(v) for v in text)
        except ValueError:
            prompt = output = 0
        if prompt < 1 or output < 1:
            raise _invalid(
                f"--lengths: {path}:{number}: expected two whole numbers >= 1 "
                f"(prompt and output tokens), got {line.strip()!r}",
                "lengths",
            )
        lengths.append((prompt, output))
    if not lengths:
        raise _invalid(f"--lengths: {path} lists no requests", "lengths")
    return Workload(tuple(lengths), str(path))


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """Everything a plan is asked. Demand is in requests/s at the workload's lengths."""

    requests_per_s: float
    workload: Workload
    slo: SloTargets
    offers: Sequence[Offer]
    site_limits: Mapping[str, int] = field(default_factory=dict)  # GPUs per site
    power_cap_w: float | None = None
    objective: str = "cost"  # or "power"
    headroom: float = 0.10  # the SLO must hold at demand × (1 + headroom)
    capacity_tokens_per_s: Mapping[Generation, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.requests_per_s > 0 or math.isinf(self.requests_per_s):
            raise _invalid("demand must be a positive number", "demand")
        if not self.offers:
            raise _invalid("at least one --offer is needed", "offer")
        labels = [o.label for o in self.offers]
        if len(set(labels)) != len(labels):
            raise _invalid(f"--offer: each GEN@SITE once, got {', '.join(labels)}", "offer")
        if self.objective not in ("cost", "power"):
            raise _invalid(
                f"objective: expected cost or power, got {self.objective!r}", "objective"
            )
        if self.objective == "cost" and any(o.price_per_gpu_hour is None for o in self.offers):
            raise _invalid(
                "a cost plan needs a price on every --offer (:price=P); or plan for power",
                "offer",
            )
        if not 0.0 <= self.headroom < 10.0:
            raise _invalid("--headroom must be in [0, 10)", "headroom")
