"""The TPOT a replica's requests got, by how many it ran at once: the batch within a TPOT target
read off what the replica actually did, not off a straight line.

A mixture-of-experts step rises steeply over the first few sequences and flatly after. A
straight step line fitted where a replica runs large, loose-target batches (`routing/estimator.py`)
puts its intercept far above the small-batch steps, so the batch it allows within a tight target
is wrong by a wide margin either way: too large on a slow replica (whose tight batch is one or two
sequences), too small on a fast one. The estimator's step is also tokens over time, which counts
a request's wait for its first token as decode time: with short answers that is a large share.

So each request that finished well adds its own TPOT at the requests the replica ran when it ended
(this router's in flight, itself included, plus other routers'), the unit the utilisation and
the admission room count in. Points live in log-spaced buckets of that count, each an
exponentially weighted mean. "The largest batch within T" is read from the top: the largest
bucket judged within T (below), interpolated towards the next one up, which is over it, or
extrapolated past the largest measured along the line's slope.

A bucket counts as within T when its mean is (the caller passes T with its headroom) and its
tail is too: the mean plus `TAIL_SPREAD` (3) standard deviations of its requests' TPOT
(exponentially weighted like the mean) within T without that headroom. The targets are p99s.
On a slow replica at a small batch a request's TPOT is set less by the batch than by how many
prompts arrive while it decodes (a 128-token prefill adds 7 to 19 ms to an 11 to 23 ms step on
the simulated MI300X), so a batch whose mean is within the target can miss it on a third to a
half of its requests (the MI300X in the single-class goodput bench met 50 to 72% where it
missed); at a large batch each step mixes many prefills and the spread is small, so the mean
binds there.

Reading from the top ignores a small batch's slow outliers (a burst of prefills); an optimistic
bucket above the true limit is corrected by the very requests it lets in. A pessimistic one is
not (the replica is held below it), so a bucket no request has updated in the last
`STALE_AFTER` is forgotten: the batch extrapolates past it again and the requests that then run
there measure it afresh.
"""

from __future__ import annotations

import math
from typing import Final

BUCKETS_PER_DOUBLING: Final = 4  # batch buckets: 19% apart
SMOOTHING: Final = 0.1  # weight of one request's TPOT in its bucket's mean
STALE_AFTER: Final = 200  # a bucket not updated in this many requests is forgotten
MAX_ANSWERS: Final = 64  # memoised answers kept (targets × slopes): the slope is re-fitted often
TAIL_SPREAD: Final = 3.0  # a bucket's tail: its mean TPOT plus this many standard deviations
# the share of the target the caller's (the mean's) headroom leaves, `stats.SLO_HEADROOM`: the
# tail is held to the target itself
TAIL_HEADROOM: Final = 0.95


class StepCurve:
    """Measured (requests in flight, TPOT s) points, one per bucket; pure bookkeeping."""

    __slots__ = ("_answers", "_ordered", "_points", "_seen", "_slope")

    def __init__(self) -> None:
        # bucket -> [mean batch, the TPOT it is judged by (s), requests seen when it was last
        # updated, mean TPOT s, its variance]
        self._points: dict[int, list[float]] = {}
        self._ordered: list[list[float]] | None = None
        self._answers: dict[float, float] = {}  # by TPOT target, at `_slope`
        self._slope = math.nan  # the slope the answers were extrapolated along
        self._seen = 0

    def observe(self, batch: float, tpot_s: float) -> None:
        """One request's TPOT, finished while `batch` requests ran on its replica."""
        if batch < 1.0 or not tpot_s > 0.0 or not math.isfinite(tpot_s):
            return
        self._seen += 1
        key = round(math.log2(batch) * BUCKETS_PER_DOUBLING)
        point = self._points.get(key)
        if point is None:
            self._points[key] = [batch, tpot_s, self._seen, tpot_s, 0.0]
            self._ordered = None
        else:
            point[0] += SMOOTHING * (batch - point[0])
            difference = tpot_s - point[3]
            point[3] += SMOOTHING * difference
            point[4] = (1.0 - SMOOTHING) * (point[4] + SMOOTHING * difference * difference)
            point[1] = judged_tpot_s(point[3], point[4])
            point[2] = self._seen
        self._answers.clear()
        if self._seen % STALE_AFTER == 0:
            self._forget_stale()

    def _forget_stale(self) -> None:
        oldest = self._seen - STALE_AFTER
        for key in [k for k, point in self._points.items() if point[2] < oldest]:
            del self._points[key]
            self._ordered = None

    def batch_within(self, tpot_s: float, per_sequence_s: float) -> float | None:
        """The largest batch judged within `tpot_s` (its mean and its tail: see the module
        docstring); `per_sequence_s` is the slope to extrapolate along; None before any measurement.
        Memoised until the next measurement or another slope (the estimator re-fits it at
        every scrape, so answers at old slopes would pile up)."""
        answers = self._answers
        if per_sequence_s != self._slope or len(answers) >= MAX_ANSWERS:
            answers.clear()
            self._slope = per_sequence_s
        answer = answers.get(tpot_s)
        if answer is not None:
            return answer
        if not self._points:
            return None
        ordered = self._ordered
        if ordered is None:
            ordered = self._ordered = [self._points[key] for key in sorted(self._points)]
        answer = _within(ordered, tpot_s, per_sequence_s)
        answers[tpot_s] = answer
        return answer

    def batch_seen_within(self, tpot_s: float) -> float | None:
        """`batch_within` without extrapolating past the largest batch measured (the batch
        it was seen to hold, not one it may hold); None before any measurement. Not memoised:
        a few dozen buckets at most."""
        if not self._points:
            return None
        ordered = self._ordered
        if ordered is None:
            ordered = self._ordered = [self._points[key] for key in sorted(self._points)]
        return _within(ordered, tpot_s, 0.0)


def judged_tpot_s(mean_s: float, variance: float) -> float:
    """The TPOT a bucket is judged by against the caller's headroomed target: its mean, or its
    tail scaled by the headroom where that is larger (see the module docstring)."""
    tail = TAIL_HEADROOM * (mean_s + TAIL_SPREAD * math.sqrt(variance))
    return tail if tail > mean_s else mean_s


def _within(ordered: list[list[float]], tpot_s: float, per_sequence_s: float) -> float:
    """`StepCurve.batch_within`'s answer; `per_sequence_s` 0 extrapolates nothing upwards."""
    slope = per_sequence_s if per_sequence_s > 0.0 else math.inf
    above: list[float] | None = None
    for index in range(len(ordered) - 1, -1, -1):
        batch, tpot = ordered[index][0], ordered[index][1]
        if tpot <= tpot_s:
            if above is None:  # within the target at the largest batch measured: past it
                return batch + (tpot_s - tpot) / slope if per_sequence_s > 0.0 else batch
            rise = above[1] - tpot
            share = (tpot_s - tpot) / rise if rise > 0.0 else 0.0
            return batch + share * (above[0] - batch)
        above = ordered[index]
    # over the target at every batch measured: below the smallest
    batch, tpot = ordered[0][0], ordered[0][1]
    return batch - (tpot - tpot_s) / slope
