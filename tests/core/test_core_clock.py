"""The manual clock moves only when told, and never backwards."""

from __future__ import annotations

import pytest

from orchestrator.core.clock import ManualClock


def test_manual_clock_stands_still_until_advanced() -> None:
    clock = ManualClock(start_s=10.0)
    assert clock.now() == 10.0
    assert clock.now() == 10.0
    clock.advance(2.5)
    assert clock.now() == 12.5
    clock.set(20.0)
    assert clock.now() == 20.0


def test_manual_clock_refuses_to_go_backwards() -> None:
    clock = ManualClock(start_s=5.0)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-0.1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(4.0)
    assert clock.now() == 5.0
