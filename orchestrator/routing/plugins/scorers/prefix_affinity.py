"""Scorer `prefix-affinity`: keep requests with the same prompt start on one replica (its prefix
cache), unless that replica is busier than the fleet by more than a bound."""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import ClassVar

from orchestrator.core.records import Replica
from orchestrator.routing.context import RequestContext
from orchestrator.routing.memo import IdentityMemo
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import parse_params
from orchestrator.routing.plugins.scorers.params import (
    DEFAULT_PREFIX_LOAD_FACTOR as DEFAULT_LOAD_FACTOR,
)
from orchestrator.routing.plugins.scorers.params import (
    DEFAULT_PREFIX_NOMINEES as DEFAULT_NOMINEES,
)
from orchestrator.routing.plugins.scorers.params import DEFAULT_VIRTUAL_NODES, PrefixAffinityParams
from orchestrator.routing.plugins.scorers.utilised import RatesByUtilisation
from orchestrator.routing.signals import DEFAULT_DEGRADED_CAPACITY_FACTOR
from orchestrator.table.snapshot import RoutingTable

NO_PREFIX_SCORE = 0.5
_RING = 1 << 64
_MASK = _RING - 1
_SPARSE = 4  # survivors under 1/4 of the table's replicas get a ring of their own


class _Ring:
    """Replicas' virtual nodes, sorted by position: positions and the owners' replica ids."""

    __slots__ = ("key", "largest", "members", "owners", "positions")

    def __init__(
        self,
        key: object,
        replicas: Iterable[Replica],
        largest: float,
        scorer: PrefixAffinityScorer,
    ) -> None:
        self.key = key  # the table or survivor tuple it was built for, kept alive by the ring
        self.largest = largest
        positions: list[int] = []
        owners: list[str] = []
        members: set[str] = set()
        for replica in replicas:
            members.add(replica.replica_id)
            points = ring_points(replica.replica_id, scorer._points(replica, largest))
            positions.extend(points)
            owners.extend([replica.replica_id] * len(points))
        # one sort of indices by position: cheaper than sorting (position, owner) tuples
        order = sorted(range(len(positions)), key=positions.__getitem__)
        self.positions = [positions[i] for i in order]
        self.owners = [owners[i] for i in order]
        self.members = frozenset(members)


def _replicas(eligible: Sequence[Candidate]) -> list[Replica]:
    return [candidate.replica for candidate in eligible]


class _Survivors:
    """One survivor tuple's replica ids by position, and whether all are on the table's ring."""

    __slots__ = ("index_of", "inside", "ring")

    def __init__(self, eligible: Sequence[Candidate]) -> None:
        self.index_of = {c.replica.replica_id: index for index, c in enumerate(eligible)}
        self.ring: _Ring | None = None  # the table ring `inside` was checked against
        self.inside = False


def _no_positions(_: RoutingTable) -> dict[str, tuple[int, ...]]:
    return {}


def _largest_capacity(table: RoutingTable) -> float:
    return max((r.capacity_prior_tokens_per_s for r in table.replicas), default=0.0)


class PrefixAffinityScorer(RatesByUtilisation):
    """Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018).

    Each replica owns points on a 64-bit ring, placed by BLAKE2b of its id so that every router
    process computes the same ring: `virtualNodes` for the table's largest capacity prior, and
    for the others in proportion to their prior (at least 1), so prefixes find their home on each
    replica in proportion to its capacity and affinity does not undo capacity-proportional
    shares. A request's point is a SplitMix64 mix of `ctx.prefix_hash`; its preference order is
    the replicas met walking the ring clockwise from that point. With ρ each candidate's
    utilisation (as in `capacity-headroom`):

        score = 1 for the first candidate in preference order with ρ ≤ (1 + loadFactor) × mean ρ,
                0 for every other candidate;
        score = 0.5 for every candidate when `ctx.prefix_hash` is None (no preference).

    The mean is over the candidates scored, so a hot prefix keeps its replica only while that
    replica is at most `loadFactor` busier than the rest, then moves to the next one on the ring.
    The order over any subset of replicas is the full order restricted to it, so a sampled
    decision agrees with an exact one; `nominate` names the first `nominees` survivors on the ring:
    one search, then a short walk that skips replicas filtered out. The ring is the table's (built
    once per table, so a soft filter flipping a replica in or out rebuilds nothing); when under a
    quarter of the table survives (one model of several), a ring of the survivors alone, kept
    for the last few survivor tuples.

    Type: prefix-affinity. Range {0, 0.5, 1}.
    Parameters: loadFactor (≥ 0, default 0.25); degradedCapacityFactor (in (0, 1], default 0.5);
    virtualNodes (1..1024, default 64); nominees (1..64, default 2).
    """

    TYPE: ClassVar[str] = "prefix-affinity"

    def __init__(
        self,
        name: str | None = None,
        *,
        load_factor: float = DEFAULT_LOAD_FACTOR,
        degraded_capacity_factor: float = DEFAULT_DEGRADED_CAPACITY_FACTOR,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        nominees: int = DEFAULT_NOMINEES,
    ) -> None:
        self.name = name or self.TYPE
        self.load_factor = load_factor
        self.degraded_capacity_factor = degraded_capacity_factor
        self.virtual_nodes = virtual_nodes
        self.nominees = nominees
        self._largest: IdentityMemo[RoutingTable, float] = IdentityMemo()
        # the ring of the table's replicas: the survivors change whenever a soft filter flips,
        # the table does not, and a ring of 512 replicas takes tens of ms to build
        self._table_ring: _Ring | None = None
        self._survivors: IdentityMemo[Sequence[Candidate], _Survivors] = IdentityMemo()
        # rings of survivors alone, when few of the table survive (one model of several)
        self._survivor_rings: IdentityMemo[Sequence[Candidate], _Ring] = IdentityMemo()
        # each replica's ring positions by id, per table (its `_points` hang on the table only)
        self._positions: IdentityMemo[RoutingTable, dict[str, tuple[int, ...]]] = IdentityMemo()

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> PrefixAffinityScorer:
        parsed = parse_params(PrefixAffinityParams, cls.TYPE, name, params)
        return cls(
            name,
            load_factor=parsed.load_factor,
            degraded_capacity_factor=parsed.degraded_capacity_factor,
            virtual_nodes=parsed.virtual_nodes,
            nominees=parsed.nominees,
        )

    def score_utilised(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        rhos: Sequence[float],
    ) -> list[float]:
        if ctx.prefix_hash is None:
            return [NO_PREFIX_SCORE] * len(candidates)
        point = prefix_point(ctx.prefix_hash)
        bound = (1.0 + self.load_factor) * sum(rhos) / len(rhos)
        scores = [0.0] * len(candidates)
        table = view.table
        largest = self._largest.get(table, _largest_capacity)
        positions_of = self._positions.get(table, _no_positions)
        distances = []
        for candidate in candidates:  # `ring_distance(point, ring_points(...))`, inlined
            replica_id = candidate.replica.replica_id
            positions = positions_of.get(replica_id)
            if positions is None:
                positions = positions_of[replica_id] = ring_points(
                    replica_id, self._points(candidate.replica, largest)
                )
            at = bisect_left(positions, point)
            distances.append(
                positions[at] - point if at < len(positions) else positions[0] + _RING - point
            )
        by_preference = sorted(range(len(candidates)), key=distances.__getitem__)
        for index in by_preference:
            if rhos[index] <= bound:
                scores[index] = 1.0
                break
        return scores

    def nominate(
        self, ctx: RequestContext, view: RoutingView, eligible: Sequence[Candidate]
    ) -> list[Candidate]:
        if ctx.prefix_hash is None or not eligible:
            return []
        table = view.table
        largest = self._largest.get(table, _largest_capacity)
        survivors = self._survivors.get(eligible, _Survivors)
        index_of = survivors.index_of
        ring: _Ring | None = None
        if len(index_of) * _SPARSE >= len(table.replicas):
            ring = self._table_ring
            if ring is None or ring.key is not table or ring.largest != largest:
                ring = self._table_ring = _Ring(table, table.replicas, largest, self)
            if survivors.ring is not ring:
                survivors.ring = ring
                survivors.inside = all(replica_id in ring.members for replica_id in index_of)
            if not survivors.inside:
                ring = None  # survivors from another table: walk their own ring
        if ring is None:
            # few survivors of many replicas: a walk round the table's ring would skip most of it
            ring = self._survivor_rings.get(
                eligible, lambda e: _Ring(e, _replicas(e), largest, self)
            )
            if ring.largest != largest:
                ring = self._survivor_rings.put(
                    eligible, _Ring(eligible, _replicas(eligible), largest, self)
                )
        wanted = min(self.nominees, len(index_of))
        positions, owners = ring.positions, ring.owners
        count = len(positions)
        start = bisect_left(positions, prefix_point(ctx.prefix_hash))
        chosen: list[int] = []
        for step in range(count):
            index = index_of.get(owners[(start + step) % count])
            if index is not None and index not in chosen:
                chosen.append(index)
                if len(chosen) == wanted:
                    break
        return [eligible[i] for i in chosen]

    def _points(self, replica: Replica, largest: float) -> int:
        """Virtual nodes of `replica`: ∝ its capacity prior, `virtual_nodes` for the largest."""
        if largest <= 0.0 or replica.capacity_prior_tokens_per_s >= largest:
            return self.virtual_nodes
        share = replica.capacity_prior_tokens_per_s / largest
        return max(1, round(self.virtual_nodes * share))


@lru_cache(maxsize=1 << 16)
def ring_points(replica_id: str, virtual_nodes: int) -> tuple[int, ...]:
    """A replica's sorted positions on the ring: the same in every process (no `hash()` salt)."""
    return tuple(
        sorted(
            int.from_bytes(
                hashlib.blake2b(f"{replica_id}#{v}".encode(), digest_size=8).digest(), "big"
            )
            for v in range(virtual_nodes)
        )
    )


def prefix_point(prefix_hash: int) -> int:
    """SplitMix64 finaliser: spreads nearby or small hashes over the whole ring."""
    z = (prefix_hash + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def ring_distance(point: int, positions: tuple[int, ...]) -> int:
    """Clockwise distance from `point` to the nearest of `positions` (sorted): the walk order."""
    index = bisect_left(positions, point)
    return positions[index] - point if index < len(positions) else positions[0] + _RING - point
