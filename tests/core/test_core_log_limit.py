"""A log that clients can trigger is bounded: a burst per period, then one line of what was left
out."""

from __future__ import annotations

import logging

import pytest

from orchestrator.core.log_limit import RateLimitedLog


def test_a_burst_per_period_is_logged_then_what_was_left_out_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = RateLimitedLog(logging.getLogger("t"), burst=3, period_s=10.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, "t")
    for index in range(50):
        log("refused %d", index)
    assert [r.getMessage() for r in caplog.records] == ["refused 0", "refused 1", "refused 2"]
    now[0] = 10.0
    log("refused again")
    assert [r.getMessage() for r in caplog.records[3:]] == [
        "47 more like this left out in 10 s",
        "refused again",
    ]


def test_nothing_is_counted_when_the_level_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "t2")
    log = RateLimitedLog(logging.getLogger("t2"), burst=1)
    for _ in range(5):
        log("x")
    assert caplog.records == []
