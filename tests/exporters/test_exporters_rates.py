"""counter_delta: resets and 32-bit wraps never produce a negative delta."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.exporters.rates import counter_delta

U32 = 2**32


def test_growth_is_the_difference() -> None:
    assert counter_delta(100, 175) == 75
    assert counter_delta(5, 5, 32) == 0


def test_a_32_bit_counter_that_wraps_counts_round_the_ring() -> None:
    assert counter_delta(U32 - 10, 5, width_bits=32) == 15


def test_a_reset_counts_from_zero() -> None:
    assert counter_delta(1_000_000, 40) == 40  # 64-bit: a decrease can only be a reset
    assert counter_delta(1_000, 40, width_bits=32) == 40  # far from the top: a reset, not a wrap


def test_negative_readings_are_rejected() -> None:
    with pytest.raises(ValueError, match="never negative"):
        counter_delta(-1, 5)


@given(
    prev=st.integers(min_value=0, max_value=2**64 - 1),
    cur=st.integers(min_value=0, max_value=2**64 - 1),
    width=st.sampled_from([None, 32, 64]),
)
def test_never_negative(prev: int, cur: int, width: int | None) -> None:
    delta = counter_delta(prev, cur, width)
    assert delta >= 0
    if cur >= prev:
        assert delta == cur - prev
