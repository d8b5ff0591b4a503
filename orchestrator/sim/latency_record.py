"""Latencies of a long simulated run in bounded memory, for its percentiles.

A planning run serves millions of requests; keeping each one's TTFT and TPOT grew the run by 16
bytes a request, so memory grew with the simulated time. A record keeps a count per bucket
instead: a bucket is a float's sign, exponent and top `MANTISSA_BITS` mantissa bits, so buckets
are 1/1024 wide in relative terms and sorted by key are sorted by value. The nearest-rank
percentile (LoadGen's method) is read off the counts: it lands in the same bucket as the exact
one, and the bucket's middle is within 0.05% of it (the lowest and highest ranks are the exact
minimum and maximum). Memory is bounded by the distinct buckets, about 1,024 per power of two
the values span, however many values come.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable
from typing import Final

__all__ = ["MANTISSA_BITS", "LatencyRecord"]

MANTISSA_BITS: Final = 10
_SHIFT: Final = 52 - MANTISSA_BITS
_DOUBLE: Final = struct.Struct("<d")
_BITS: Final = struct.Struct("<Q")
_MASK: Final = (1 << 64) - 1


class LatencyRecord:
    """Counts of non-negative latencies (seconds; `inf` for a request that never got one)."""

    __slots__ = ("_bits_sum", "_bits_xor", "_counts", "count", "maximum", "minimum")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.count = 0
        self.minimum = math.inf
        self.maximum = -math.inf
        # Every value's exact bits, summed and xored (order does not count): two runs whose
        # latencies differ inside one bucket still digest apart.
        self._bits_sum = 0
        self._bits_xor = 0

    @classmethod
    def of(cls, values: Iterable[float]) -> LatencyRecord:
        record = cls()
        for value in values:
            record.add(value)
        return record

    def add(self, value: float) -> None:
        if not value >= 0.0:  # also refuses NaN, whose bits would sort anywhere
            raise ValueError(f"a latency is at least 0 s, got {value!r}")
        value += 0.0  # -0.0 to 0.0: its sign bit would sort it above inf
        bits: int = _BITS.unpack(_DOUBLE.pack(value))[0]
        key = bits >> _SHIFT
        counts = self._counts
        counts[key] = counts.get(key, 0) + 1
        self.count += 1
        self._bits_sum = (self._bits_sum + bits) & _MASK
        self._bits_xor ^= bits
        if value < self.minimum:
            self.minimum = value
        if value > self.maximum:
            self.maximum = value

    def add_times(self, value: float, times: int) -> None:
        """`value` `times` times over (e.g. `inf` for each request still waiting at the cut)."""
        if times <= 0:
            return
        self.add(value)
        bits: int = _BITS.unpack(_DOUBLE.pack(value + 0.0))[0]
        self._counts[bits >> _SHIFT] += times - 1
        self.count += times - 1
        self._bits_sum = (self._bits_sum + (times - 1) * bits) & _MASK
        if (times - 1) % 2:
            self._bits_xor ^= bits

    def copy(self) -> LatencyRecord:
        twin = LatencyRecord()
        twin._counts = dict(self._counts)
        twin.count, twin.minimum, twin.maximum = self.count, self.minimum, self.maximum
        twin._bits_sum, twin._bits_xor = self._bits_sum, self._bits_xor
        return twin

    def __len__(self) -> int:
        return self.count

    def buckets(self) -> int:
        """Distinct buckets held: what the record's memory grows with."""
        return len(self._counts)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0-100) by the nearest rank, within 0.05%; NaN when empty."""
        if self.count == 0:
            return math.nan
        rank = max(1, math.ceil(q / 100.0 * self.count))
        if rank == 1:
            return self.minimum
        if rank >= self.count:
            return self.maximum
        seen = 0
        for key in sorted(self._counts):
            seen += self._counts[key]
            if seen >= rank:
                return min(max(_middle(key), self.minimum), self.maximum)
        return self.maximum  # not reached: the counts add up to `count`

    def digest(self) -> str:
        """A digest of the counts, the extremes and every value's bits: equal for two runs
        that recorded the same values, in any order."""
        parts = [f"{key}:{self._counts[key]}" for key in sorted(self._counts)]
        parts.append(f"{self.minimum!r}|{self.maximum!r}|{self._bits_sum}|{self._bits_xor}")
        return hashlib.blake2b(",".join(parts).encode(), digest_size=16).hexdigest()


def _middle(key: int) -> float:
    """The middle of bucket `key` (for `inf`'s bucket, `inf`; for 0's, 0)."""
    if key == 0:
        return 0.0
    low: float = _DOUBLE.unpack(_BITS.pack(key << _SHIFT))[0]
    if math.isinf(low):
        return low
    high: float = _DOUBLE.unpack(_BITS.pack((key + 1) << _SHIFT))[0]
    return (low + high) / 2.0
