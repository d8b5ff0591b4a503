"""`InFlightHistory`: what a router had in flight on a replica at a past moment."""

from __future__ import annotations

import random
from collections import deque

from orchestrator.routing.in_flight_history import InFlightHistory


class _Walked:
    """The plain definition: keep the window's changes, read back from the newest."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.changes: deque[tuple[float, int]] = deque()
        self.before = 0

    def changed(self, now_s: float, in_flight: int) -> None:
        self.changes.append((now_s, in_flight))
        while self.changes[0][0] < now_s - self.window_s:
            self.before = self.changes.popleft()[1]

    def at(self, when_s: float) -> int:
        for time_s, value in reversed(self.changes):
            if time_s <= when_s:
                return value
        return self.before


def test_reads_the_value_set_by_the_last_change_at_or_before_the_moment() -> None:
    history = InFlightHistory(3.0)
    history.changed(1.0, 1)
    history.changed(2.0, 2)
    history.changed(2.5, 1)
    assert history.at(0.5) == 0
    assert history.at(1.0) == 1
    assert history.at(2.4) == 2
    assert history.at(9.0) == 1


def test_a_moment_older_than_the_window_reads_as_the_value_before_the_oldest_change_kept() -> None:
    history = InFlightHistory(1.0)
    history.changed(0.0, 5)
    history.changed(0.5, 6)
    history.changed(2.0, 7)  # 0.0 and 0.5 leave the window: 6 was in flight before 2.0
    assert history.at(0.2) == 6
    assert history.at(2.0) == 7


def test_a_busy_replica_answers_as_the_plain_walk_does_over_many_changes() -> None:
    rng = random.Random(7)
    history, walked = InFlightHistory(3.0), _Walked(3.0)
    now_s, in_flight = 0.0, 0
    for _ in range(20_000):  # about a thousand changes a second, long past one compaction
        now_s += rng.expovariate(1000.0) if rng.random() < 0.9 else 0.0  # some share a time
        in_flight = max(0, in_flight + rng.choice((-1, 1)))
        history.changed(now_s, in_flight)
        walked.changed(now_s, in_flight)
        when_s = now_s - rng.uniform(0.0, 4.0)
        assert history.at(when_s) == walked.at(when_s)
        assert history.at(now_s) == in_flight
