"""The fleet model's limit under an SLO: for each replica, the largest batch whose step (decode
of the batch plus its share of prefill, `StepCostModel`) stays within a TPOT target, and the rate
it sustains there; for two classes, the best split of the fleet between them.

Used by `bench/slo_goodput.py` to say how far a router is from what the fleet could do.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.core.generations import Generation
from orchestrator.fleet.step_cost import StepCostModel, StepWork


def step_s(model: StepCostModel, batch: int, prompt: int, output: int) -> float:
    """Real seconds of one engine step decoding `batch` sequences in steady state, each also
    bringing its prompt's share of prefill (prompt / output tokens per step)."""
    return model.step_time_s(
        StepWork(
            decode_sequences=batch,
            decode_context_tokens=round(batch * (prompt + output / 2)),
            prefill_tokens=round(batch * prompt / output),
            prefill_attention_pairs=batch / output * prompt**2 / 2,
        )
    )


@dataclass(frozen=True, slots=True)
class ReplicaLimit:
    generation: Generation
    batch: int  # the largest batch within the TPOT target (0: none)
    step_s: float
    requests_per_s: float  # real time


def replica_limit(generation: Generation, tpot_s: float, prompt: int, output: int) -> ReplicaLimit:
    model = StepCostModel.for_generation(generation)
    best = ReplicaLimit(generation, 0, math.nan, 0.0)
    for batch in range(1, model.figures.engine.max_num_seqs + 1):
        step = step_s(model, batch, prompt, output)
        if step > tpot_s:
            break
        best = ReplicaLimit(generation, batch, step, batch / (output * step))
    return best


def capacity_at(generation: Generation, tpot_s: float, prompt: int, output: int) -> float:
    """Output tokens/s (real) a replica sustains within `tpot_s`: the table's prior."""
    limit = replica_limit(generation, tpot_s, prompt, output)
    return limit.requests_per_s * output


def format_limits(limits: Sequence[ReplicaLimit], args: argparse.Namespace) -> str:
    lines = [
        f"SLO: p99 TTFT <= {args.ttft:g} s, p99 TPOT <= {args.tpot * 1e3:g} ms (real hardware;"
        f" x{args.time_scale:g} wall); prompt {args.prompt_tokens}, output {args.output_tokens}"
        " tokens",
        "fleet model, per replica: largest batch within the TPOT target, its step, req/s (wall)",
    ]
    for limit in limits:
        lines.append(
            f"  {limit.generation.value}: batch {limit.batch}, step {limit.step_s * 1e3:.1f} ms,"
            f" {limit.requests_per_s / args.time_scale:.2f} req/s"
        )
    total = sum(limit.requests_per_s for limit in limits) / args.time_scale
    lines.append(f"  fleet limit under the SLO: {total:.2f} req/s (wall)")
    return "\n".join(lines)


def two_class_limit(
    tight: Sequence[float], loose: Sequence[float], tight_rate: float
) -> tuple[float, int]:
    """(req/s, replicas held for the tight class) of the best split of the fleet between a tight
    class offered at `tight_rate` and a loose one offered without limit, when the tight class
    must meet its target: the k replicas with the largest rate within the tight target serve
    it (and loose work up to that batch), the others loose work at theirs; the best k whose
    tight rates hold `tight_rate`. `tight` and `loose` are each replica's rate (req/s) within
    the two TPOT targets. (0, 0) when even the whole fleet cannot hold the tight class."""
    order = sorted(range(len(tight)), key=lambda i: -tight[i])
    best = (0.0, 0)
    held = 0.0
    for k, index in enumerate(order, start=1):
        held += tight[index]
        if held < tight_rate:
            continue
        total = held + sum(loose[i] for i in order[k:])
        if total > best[0]:
            best = (total, k)
    return best
