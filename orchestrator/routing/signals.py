"""Load and latency predictions shared by the scorers: one formula, one place.

Utilisation is what makes generations comparable: outstanding requests divided by how many
sequences the replica decodes at once within the TPOT target, so an MI355X holding k× the
requests of an MI300X is as busy as it when their capacities differ k× (about 4.6 by the fleet
model's priors, `fleet.figures.capacity_prior_tokens_per_s`).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.core.records import NodeHealth
from orchestrator.routing.plugin import Candidate, RoutingView

DEFAULT_DEGRADED_CAPACITY_FACTOR = 0.5
MAX_PREDICTED_UTILISATION = 0.95  # caps the queueing blow-up 1/(1 − ρ) at 20×
UNKNOWN_TTFT_FRACTION = 0.25  # an unmeasured replica's light-load TTFT, as a fraction of target
UNKNOWN_TPOT_FRACTION = 0.5  # an unmeasured replica's light-load TPOT, as a fraction of target


def outstanding(candidate: Candidate) -> float:
    """Requests the replica holds: ours in flight plus what other routers sent it."""
    stats = candidate.stats
    return stats.in_flight + stats.others_in_flight()


def utilisation(
    candidate: Candidate,
    target_tpot_s: float,
    degraded_capacity_factor: float = DEFAULT_DEGRADED_CAPACITY_FACTOR,
) -> float:
    """ρ = (outstanding + 1) / (concurrency capacity × health factor), counting the new request.

    Concurrency capacity is `ReplicaStats.concurrency_capacity(target_tpot_s)` (sequences);
    the health factor is `degraded_capacity_factor` on a DEGRADED node, else 1. ρ = 1 means
    the replica is at the load where it just meets the TPOT target; it is unbounded above.
    """
    return utilisations((candidate,), target_tpot_s, degraded_capacity_factor)[0]


def utilisations(
    candidates: Sequence[Candidate],
    target_tpot_s: float,
    degraded_capacity_factor: float = DEFAULT_DEGRADED_CAPACITY_FACTOR,
) -> list[float]:
    """`utilisation` of each candidate, in order; the scorers' hot loop, so written out flat.

    Capacity is at the TPOT target that binds the replica's batch if it takes the request: the
    request's own, or a tighter one of a request it already runs (one batch, one step time) or
    that the replica is reserved for, so loose-target work goes where it does not slow
    tight-target work down.
    """
    degraded = NodeHealth.DEGRADED
    out = []
    for candidate in candidates:
        stats = candidate.stats
        tightest = stats.tightest_tpot_s
        if stats.reserved_tpot_s < tightest:
            tightest = stats.reserved_tpot_s
        capacity = stats.concurrency_capacity(
            tightest if tightest < target_tpot_s else target_tpot_s
        )
        if candidate.replica.node_health is degraded:
            capacity *= degraded_capacity_factor
        out.append((stats.in_flight + stats.others + 1) / capacity)
    return out


def predicted_ttft_s(candidate: Candidate, view: RoutingView, rho: float) -> float:
    """base / (1 − min(ρ, 0.95)): an M/M/1-like queueing blow-up over the light-load TTFT.

    base = the replica's measured TTFT (smoothed), or a quarter of the target when unmeasured.
    """
    measured = candidate.stats.ttft_s
    base = measured if measured is not None else view.target_ttft_s * UNKNOWN_TTFT_FRACTION
    return base / (1.0 - min(rho, MAX_PREDICTED_UTILISATION))


def predicted_tpot_s(candidate: Candidate, view: RoutingView, rho: float) -> float:
    """base × (1 + ρ): decode steps grow with the batch, from base when idle to 2 × base at ρ = 1.

    base = the replica's measured TPOT (smoothed), or half the target when unmeasured, so an
    unmeasured replica meets the target exactly at ρ = 1, which is what concurrency capacity means.
    """
    measured = candidate.stats.tpot_s
    base = measured if measured is not None else view.target_tpot_s * UNKNOWN_TPOT_FRACTION
    return base * (1.0 + rho)
