"""Other routers' requests on each replica, between two load reports.

A report gives the engine's count at its scrape, less what this router had in flight then. Other
routers' requests finish after that and are sent on somewhere this router cannot see until the
next report. Counting them where they were makes every router move its next requests away from
the same busy replicas at once, so those turn idle and the idle ones busy: with four routers the
imbalance grows at each round of requests instead of shrinking. This router sees its own requests
finish; the same share of the others' is taken to have finished since the scrapes and to have
been sent on by capacity. So each replica's others is moved from its reported figure toward its
capacity's share of its model's others by `f`, the share of this router's requests in flight at
the scrapes (their mean time) that have finished since (only those: a request sent after the
scrapes, or one that failed at once, says nothing of how far the others have turned over):

    others_i = kept * reported_i + (1 - kept) * C_i * sum(others) / sum(C),    kept = 1 - f,

the sums over the ready replicas of the same model (a request for one model never moves to
another's replicas, and one that is not ready takes none) whose load is known: a stale or
unreadable load is unknown, so it neither counts in the sums nor is moved once it has gone stale.
A router alone, whose reports show no others, is unaffected.

Updated in O(replicas + requests finished since the scrapes) when reports arrive (O(1) while
none shows others: a router alone, whose report batches then cost it nothing here), and in
O(replicas a whole request off their share) each time `f` has moved by a quarter, until it
reaches 1: a request finishing is O(1) almost always.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Mapping

from orchestrator.routing.stats import ReplicaStats

F_STEPS = 4  # `f` is applied in steps of 1 / F_STEPS of the router's in-flight at the scrapes


class OthersEstimate:
    """Reported others per replica and this router's totals over the last `window_s`."""

    __slots__ = (
        "_deviations",
        "_done",
        "_finishes",
        "_in_flight_ref",
        "_kept",
        "_refreshed_at",
        "_reported",
        "_scraped_s",
        "_totals",
        "_window_s",
        "_with_others",
    )

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._reported: dict[str, tuple[int, float]] = {}  # id: (others, scraped at)
        self._with_others: set[str] = set()  # of those, the ones whose report shows others
        self._totals: list[tuple[float, int]] = []  # (time, in flight), oldest first
        self._finishes: deque[tuple[float, float]] = deque()  # (finished at, started at)
        # replicas off their share: (share, reported - share)
        self._deviations: dict[str, tuple[float, float]] = {}
        self._scraped_s = -math.inf  # the reports' mean scrape time
        self._done = 0  # of ours in flight then, finished since
        self._in_flight_ref = 0
        self._refreshed_at = 0
        self._kept = 1.0  # the share of the reported skew applied last

    def reported(self, replica_id: str, others: int, observed_at_s: float) -> None:
        self._reported[replica_id] = (others, observed_at_s)
        if others:
            self._with_others.add(replica_id)
        else:
            self._with_others.discard(replica_id)

    def forget(self, replica_id: str) -> None:
        self._reported.pop(replica_id, None)
        self._with_others.discard(replica_id)
        self._deviations.pop(replica_id, None)

    def rebase(
        self,
        now_s: float,
        in_flight: int,
        stats: Mapping[str, ReplicaStats],
        ready_models: Mapping[str, str],
    ) -> None:
        """After a batch of reports: each ready replica's share, who is off it, and the totals at
        the scrapes. `ready_models`: the model of each ready replica, by id."""
        totals = self._totals
        totals.append((now_s, in_flight))
        keep_from = bisect_right(totals, (now_s - self._window_s, math.inf))
        if keep_from > 1:
            del totals[: keep_from - 1]
        if not self._with_others:
            # No report shows other routers' requests (a router alone): every share is 0 and
            # every replica at it, so nothing is off its share. The scrape times and turnover are
            # read only for replicas that are, so they wait for the next batch that has some;
            # the reports too old to count are dropped then (each shows none meanwhile).
            self._deviations = {}
            return
        by_model: dict[str, list[tuple[str, int, float]]] = {}
        others_by_model: dict[str, int] = {}
        scraped: list[float] = []
        oldest_s = now_s - self._window_s
        reported = self._reported
        gone = []
        for replica_id, (others, at_s) in reported.items():  # once per report batch: kept lean
            replica = stats.get(replica_id)
            if at_s < oldest_s or replica is None:
                gone.append(replica_id)  # read too long ago to set against our totals
                continue
            model = ready_models.get(replica_id)
            # ready, with a load that is known now (`ReplicaStats.load_known`)
            if model is None or replica.load is None or now_s > replica.load_known_until_s:
                continue
            members = by_model.get(model)
            if members is None:
                members = by_model[model] = []
                others_by_model[model] = 0
            members.append((replica_id, others, replica.capacity_tokens_per_s))
            others_by_model[model] += others
            scraped.append(at_s)
        for replica_id in gone:
            del reported[replica_id]
            self._with_others.discard(replica_id)
        self._deviations = {}
        if not scraped:
            return
        for model, members in by_model.items():
            total_others = others_by_model[model]
            if total_others == 0:  # every share 0 and every replica at it (a router alone)
                continue
            total_capacity = sum(capacity for _, _, capacity in members)
            for replica_id, others, capacity in members:
                if total_capacity > 0:
                    share = capacity * total_others / total_capacity
                else:
                    share = total_others / len(members)
                if abs(others - share) >= 1.0:  # a whole request off: a rounding is no skew
                    self._deviations[replica_id] = (share, others - share)
        scraped_s = self._scraped_s = sum(scraped) / len(scraped)
        index = bisect_right(totals, (scraped_s, math.inf)) - 1
        _, self._in_flight_ref = totals[max(0, index)]
        done = 0
        for end, start in reversed(self._finishes):  # newest first: only those since the scrapes
            if end <= scraped_s:
                break
            done += start <= scraped_s
        self._done = done
        self._apply(now_s, stats)

    def finished(self, now_s: float, started_s: float, stats: Mapping[str, ReplicaStats]) -> None:
        """One of this router's requests, sent at `started_s`, finished at `now_s`: apply `f`
        again once those in flight at the scrapes have turned over by another step."""
        finishes = self._finishes
        finishes.append((now_s, started_s))
        while finishes[0][0] < now_s - self._window_s:
            finishes.popleft()
        if started_s > self._scraped_s:
            return
        self._done += 1
        if (
            self._kept > 0.0
            and self._deviations
            and self._done - self._refreshed_at >= self._step()
        ):
            self._apply(now_s, stats)

    def _step(self) -> int:
        return max(1, self._in_flight_ref // F_STEPS)

    def _apply(self, now_s: float, stats: Mapping[str, ReplicaStats]) -> None:
        self._refreshed_at = done = self._done
        in_flight = self._in_flight_ref
        # No request in flight at the scrapes: no sign of how fast requests turn over.
        turned = 0.0 if in_flight == 0 else min(1.0, max(0.0, done / in_flight))
        kept = self._kept = 1.0 - turned
        for replica_id, (share, deviation) in list(self._deviations.items()):
            replica = stats.get(replica_id)
            if replica is None or not replica.load_known(now_s):
                del self._deviations[replica_id]  # stale since: unknown, left as it was
                continue
            replica.others = max(0, round(share + kept * deviation))
