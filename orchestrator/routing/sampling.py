"""`random.Random.sample` for the profile's draw of k candidates, cheaper, the same draws.

A decision samples 8 of hundreds of survivors; CPython's `sample` spends most of its time on
argument checks and on one `_randbelow` call per draw. For a population larger than CPython's
set-selection threshold this draws the same `getrandbits` values in the same order and keeps the
same ones (CPython 3.11-3.13 `Random.sample`, set branch), so a seeded profile picks exactly what
it picked before; smaller populations go to `Random.sample` itself. A test checks the agreement.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from functools import cache
from typing import TypeVar

T = TypeVar("T")


@cache  # one k per profile: the logarithm once, not per decision
def _set_branch_threshold(k: int) -> int:
    """The population size at or below which CPython's `sample` copies the pool instead."""
    size = 21
    if k > 5:
        size += 4 ** math.ceil(math.log(k * 3, 4))
    return size


def sample(rng: random.Random, population: Sequence[T], k: int) -> list[T]:
    """`rng.sample(population, k)`: k distinct items, uniformly, advancing `rng` the same way."""
    n = len(population)
    if not 0 <= k <= n or n <= _set_branch_threshold(k):
        return rng.sample(population, k)
    getrandbits = rng.getrandbits
    bits = n.bit_length()
    chosen: set[int] = set()
    out = []
    for _ in range(k):
        index = getrandbits(bits)
        while index >= n or index in chosen:  # `_randbelow(n)`, redrawn while already chosen
            index = getrandbits(bits)
        chosen.add(index)
        out.append(population[index])
    return out
