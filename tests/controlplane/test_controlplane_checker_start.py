"""Checker actors are kept checking: one whose checks died starts them again, and the control
plane's start calls run at once, bounded, so one lost actor holds none of the others up. A load's
age when sent on counts on the monotonic clock."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from orchestrator.config import default_config
from orchestrator.controlplane.checker_actor import CheckerShare, ExternalChecker, start_checkers
from orchestrator.controlplane.metrics_page import read_age_s
from orchestrator.core.records import ReplicaLoad


class _FailsOnce:
    """Checks that die of an error on their first run and keep going on the next."""

    def __init__(self) -> None:
        self.runs = 0

    async def run(self) -> None:
        self.runs += 1
        if self.runs == 1:
            raise RuntimeError("registry gone")
        await asyncio.sleep(3600)


def test_a_checker_whose_checks_died_starts_them_again_and_logs_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> int:
        checker = ExternalChecker(CheckerShare.whole(default_config()), registry=None)
        checks = _FailsOnce()
        checker._checker = checks  # type: ignore[assignment]
        await checker.start()
        await asyncio.sleep(0)  # the first run dies
        await checker.start()
        await asyncio.sleep(0)
        await checker.start()  # running now: not started twice
        await checker.stop()
        return checks.runs

    with caplog.at_level(logging.ERROR, logger="orchestrator.controlplane.checker_actor"):
        assert asyncio.run(scenario()) == 2
    assert "registry gone" in caplog.text


def test_checker_starts_run_at_once_and_a_hung_one_is_given_up_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started: list[str] = []

    async def ok(name: str) -> int:
        await asyncio.sleep(0.05)
        started.append(name)
        return 1

    async def fails() -> int:
        raise RuntimeError("actor restarting")

    async def scenario() -> float:
        begin = time.monotonic()
        hung = asyncio.Event()
        await start_checkers([ok("a"), hung.wait(), fails(), ok("b")], timeout_s=0.3)
        return time.monotonic() - begin

    with caplog.at_level(logging.WARNING, logger="orchestrator.controlplane.checker_actor"):
        took_s = asyncio.run(scenario())
    assert sorted(started) == ["a", "b"] and took_s < 1.0
    assert "2 of 4" in caplog.text and "actor restarting" in caplog.text


def test_a_loads_age_counts_from_its_read_on_the_monotonic_clock_not_its_wall_stamp() -> None:
    """A wall clock stepped back an hour after the read (NTP) leaves the age what it was."""
    load = ReplicaLoad(running=1, waiting=0, kv_cache_usage=0.1, observed_at_s=time.time() + 3600)
    age_s = read_age_s(load, time.monotonic() - 0.25)
    assert 0.25 <= age_s < 5.0
    assert read_age_s(None, time.monotonic() - 0.25) == 0.0
