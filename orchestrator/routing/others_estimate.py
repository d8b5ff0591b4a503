"""Other routers' requests on each replica, as this router should count them between reports.

A report gives the engine's count at its scrape, less what this router had in flight then: the
others. Between two reports the other routers go on placing requests where this router cannot
see. Counting the others where they were makes every router move away from the same busy replica
at once (and onto the same idle one), so the skew swaps places instead of shrinking. Counting
them as perfectly spread (each router balancing only its own) leaves the remainders of every
router's share landing on the same replicas by chance, for good.

So each router corrects its own share of what the reports show off balance, and counts on the
others to correct the rest. With `own_i` this router's requests on replica i at the scrape,
`L_i` the engine's count then (at least `own_i`: this router's requests on their way count as
there), `N = Σ L` and `s = Σ own / N` over the ready replicas of the same model (a request for
one model never moves to another's) whose load is known and whose circuit is closed here, the
skew is `d_i = L_i − N·C_i/ΣC` (`C`: capacity) and

    others_i = max(0, (L_i − own_i) − (1 − s)·d_i).

What this router then places evens out `own_i + others_i`, which moves `s·d_i` of its own
requests: every router doing the same moves `Σ s·d_i = d_i` in all, and a balanced fleet stays
as it is (each router puts a finished request's successor where it finished). In `wrk`'s closed
loop, where every router's requests end and restart in the same wave, four routers reach the
single router's even spread within a few waves (`bench/fleet_scale.py`, and the waves test in
`tests/routing/test_routing_load_reports.py`); under Poisson load they spread about as well as
routers that balance their own alone, where the turnover blend this replaced spread worse
(`bench/router_spread.py`).

A stale or unreadable load is unknown: it neither counts in the sums nor is moved once it has
gone stale. A router alone (no report shows others) is unaffected. Updated in O(replicas) per
batch of reports that shows others, O(replicas corrected before) otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.routing.stats import ReplicaStats


class OthersEstimate:
    """The last report per replica (others, this router's own then, when scraped)."""

    __slots__ = ("_corrected", "_reported", "_window_s", "_with_others")

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._reported: dict[str, tuple[int, int, float]] = {}  # id: (others, own, scraped at)
        self._with_others: set[str] = set()  # of those, the ones whose report shows others
        self._corrected: set[str] = set()  # replicas whose `others` is not their reported figure

    def reported(self, replica_id: str, others: int, own: int, observed_at_s: float) -> None:
        self._reported[replica_id] = (others, own, observed_at_s)
        if others:
            self._with_others.add(replica_id)
        else:
            self._with_others.discard(replica_id)

    def forget(self, replica_id: str) -> None:
        self._reported.pop(replica_id, None)
        self._with_others.discard(replica_id)
        self._corrected.discard(replica_id)

    def rebase(
        self, now_s: float, stats: Mapping[str, ReplicaStats], ready_models: Mapping[str, str]
    ) -> None:
        """After a batch of reports: set each ready replica's `others` to the reported figure
        less the other routers' share of its skew. `ready_models`: each ready replica's model.
        A replica corrected before whose model no longer shows others (the batch may not have
        reported it) reads its reported figure again."""
        if not self._with_others:  # a router alone: every `others` is the reported 0
            if self._corrected:
                self._restore(self._corrected, now_s, stats, ready_models)
                self._corrected = set()
            return
        # model: [(id, stats, others, own, capacity)], and per model Σ others, Σ own, Σ capacity
        by_model: dict[str, list[tuple[str, ReplicaStats, int, int, float]]] = {}
        sums: dict[str, tuple[int, int, float]] = {}
        oldest_s = now_s - self._window_s
        reported = self._reported
        gone = []
        for replica_id, (others, own, at_s) in reported.items():  # once per batch: kept lean
            replica = stats.get(replica_id)
            if at_s < oldest_s or replica is None:
                gone.append(replica_id)  # read too long ago to set against anything now
                continue
            model = ready_models.get(replica_id)
            # ready, routable by this router, with a load that is known now (`load_known`)
            if (
                model is None
                or replica.circuit_open
                or replica.load is None
                or now_s > replica.load_known_until_s
            ):
                continue
            capacity = replica.capacity_tokens_per_s
            members = by_model.get(model)
            if members is None:
                members = by_model[model] = []
                sums[model] = (0, 0, 0.0)
            members.append((replica_id, replica, others, own, capacity))
            total_others, total_own, total_capacity = sums[model]
            sums[model] = (total_others + others, total_own + own, total_capacity + capacity)
        for replica_id in gone:
            del reported[replica_id]
            self._with_others.discard(replica_id)
        corrected: set[str] = set()
        for model, members in by_model.items():
            total_others, total_own, total_capacity = sums[model]
            if total_others == 0:  # this model's reports show no other router
                continue
            total = total_others + total_own
            others_part = total_others / total  # 1 − s: what the other routers correct
            even = total / len(members)
            for replica_id, replica, others, own, capacity in members:
                fair = capacity * total / total_capacity if total_capacity > 0 else even
                estimate = others - others_part * (others + own - fair)
                replica.others = estimate if estimate > 0.0 else 0.0
                corrected.add(replica_id)
        left = self._corrected - corrected
        if left:
            self._restore(left, now_s, stats, ready_models)
        self._corrected = corrected

    def _restore(
        self,
        replica_ids: set[str],
        now_s: float,
        stats: Mapping[str, ReplicaStats],
        ready_models: Mapping[str, str],
    ) -> None:
        """Back to the reported figure, where the load is still known (a stale one keeps its
        last figure: unknown is not idle)."""
        for replica_id in replica_ids:
            replica, report = stats.get(replica_id), self._reported.get(replica_id)
            if replica is None or report is None or replica_id not in ready_models:
                continue
            if replica.load is not None and now_s <= replica.load_known_until_s:
                replica.others = float(report[0])
