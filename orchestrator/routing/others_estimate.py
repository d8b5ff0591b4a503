"""Other routers' requests on each replica, between two load reports.

A report gives the engine's count at its scrape, less what this router had in flight then. Other
routers' requests finish after that and are sent on somewhere this router cannot see until the
next report. Counting them where they were makes every router move its next requests away from
the same busy replicas at once, so those turn idle and the idle ones busy: with four routers the
imbalance grows at each round of requests instead of shrinking. This router sees its own requests
finish; the same share of the others' is taken to have finished since the scrapes and to have
been sent on evenly. So each replica's others is moved from its reported figure toward the
reported mean by `f`: the share of this router's requests in flight at the scrapes (their mean
time) that have finished since. A router alone, whose reports show no others, is unaffected.

Updated in O(replicas) when reports arrive, and in O(replicas a whole request off the mean) each
time `f` has moved by a quarter, until it reaches 1: a request finishing is O(1) almost always.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping

from orchestrator.routing.stats import ReplicaStats

F_STEPS = 4  # `f` is applied in steps of 1 / F_STEPS of the router's in-flight at the scrapes


class OthersEstimate:
    """Reported others per replica and this router's totals over the last `window_s`."""

    __slots__ = (
        "_deviations",
        "_finished_ref",
        "_in_flight_ref",
        "_kept",
        "_mean",
        "_refreshed_at",
        "_reported",
        "_totals",
        "_window_s",
    )

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._reported: dict[str, tuple[int, float]] = {}  # id: (others, scraped at)
        self._totals: list[tuple[float, int, int]] = []  # (time, finished, in flight), oldest first
        self._mean = 0.0
        self._deviations: dict[str, float] = {}  # replicas off the mean: reported - mean
        self._finished_ref = 0
        self._in_flight_ref = 0
        self._refreshed_at = 0
        self._kept = 1.0  # the share of the reported skew applied last

    def reported(self, replica_id: str, others: int, observed_at_s: float) -> None:
        self._reported[replica_id] = (others, observed_at_s)

    def forget(self, replica_id: str) -> None:
        self._reported.pop(replica_id, None)
        self._deviations.pop(replica_id, None)

    def rebase(
        self, now_s: float, finished: int, in_flight: int, stats: Mapping[str, ReplicaStats]
    ) -> None:
        """After a batch of reports: the mean, who is off it, and the totals at the scrapes."""
        totals = self._totals
        totals.append((now_s, finished, in_flight))
        keep_from = bisect_right(totals, (now_s - self._window_s, math.inf, 0))
        if keep_from > 1:
            del totals[: keep_from - 1]
        reported = self._reported
        if not reported:
            return
        count = len(reported)
        self._mean = sum(others for others, _ in reported.values()) / count
        self._deviations = {
            rid: others - self._mean
            for rid, (others, _) in reported.items()
            if abs(others - self._mean) >= 1.0  # a whole request off: a rounding is no skew
        }
        scraped_s = sum(at for _, at in reported.values()) / count
        index = bisect_right(totals, (scraped_s, math.inf, 0)) - 1
        _, self._finished_ref, self._in_flight_ref = totals[max(0, index)]
        self._apply(finished, stats)

    def finished(self, finished: int, stats: Mapping[str, ReplicaStats]) -> None:
        """This router's finished total moved: apply `f` again once it has moved by a step."""
        if self._kept > 0.0 and self._deviations and finished - self._refreshed_at >= self._step():
            self._apply(finished, stats)

    def _step(self) -> int:
        return max(1, self._in_flight_ref // F_STEPS)

    def _apply(self, finished: int, stats: Mapping[str, ReplicaStats]) -> None:
        self._refreshed_at = finished
        in_flight = self._in_flight_ref
        done = finished - self._finished_ref
        # No request in flight at the scrapes: no sign of how fast requests turn over.
        share = 0.0 if in_flight == 0 else min(1.0, max(0.0, done / in_flight))
        kept = self._kept = 1.0 - share
        mean = self._mean
        for replica_id, deviation in self._deviations.items():
            replica = stats.get(replica_id)
            if replica is not None:
                replica.others = max(0, round(mean + kept * deviation))
