"""Counter deltas that are never negative, across hardware wraps and resets.

mlx5 queue counters are 32-bit and wrap at 2^32; a driver reload or a link reset restarts any
counter at 0. Health evaluation and the fabric simulator take deltas between two reads of a raw
counter, and a negative delta there would read as a huge drop (or crash a rate) — so every delta
goes through `counter_delta`.
"""

from __future__ import annotations


def counter_delta(prev: int, cur: int, width_bits: int | None = None) -> int:
    """How much a raw counter grew from `prev` to `cur`; never negative.

    `width_bits` is the hardware counter's width (32 for mlx5 Q-counters, 64 or None for the
    rest). A decrease is a wrap when the counter is narrow and `prev` sat in the top half of its
    range (the only place a wrap between two reads can start): the delta is then the distance
    round the ring. Any other decrease is a reset, and the counter counted `cur` since it.
    """
    if prev < 0 or cur < 0:
        raise ValueError(f"counters are never negative: prev={prev}, cur={cur}")
    if cur >= prev:
        return cur - prev
    if width_bits is not None and width_bits < 64:
        modulus = 1 << width_bits
        if modulus // 2 <= prev < modulus:
            return cur + modulus - prev
    return cur
