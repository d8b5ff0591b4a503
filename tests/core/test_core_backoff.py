"""Reconnect delays grow exponentially to a cap, are jittered, and start over after a success."""

from __future__ import annotations

import random

import pytest

from orchestrator.core.backoff import Backoff


def test_delays_stay_under_a_ceiling_that_doubles_to_the_cap_and_resets() -> None:
    backoff = Backoff(first_s=0.5, max_s=4.0, rng=random.Random(3))
    ceilings = []
    for _ in range(6):
        ceilings.append(backoff.ceiling_s)
        assert 0.0 <= backoff.next_delay_s() <= ceilings[-1]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.ceiling_s == 0.5


def test_clients_that_fail_together_do_not_retry_together() -> None:
    delays = [Backoff(1.0, 8.0, rng=random.Random(seed)).next_delay_s() for seed in range(50)]
    assert len({round(d, 3) for d in delays}) > 40
    assert 0.3 < sum(delays) / len(delays) < 0.7  # uniform on [0, 1]: mean one half


@pytest.mark.parametrize(("first", "cap", "multiplier"), [(0, 1, 2), (2, 1, 2), (1, 2, 0.5)])
def test_a_backoff_that_cannot_work_is_refused(first: float, cap: float, multiplier: float) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(first, cap, multiplier)
