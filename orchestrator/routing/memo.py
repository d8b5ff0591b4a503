"""Work derived from an immutable sequence, remembered while that sequence is in use.

Profiles hand plugins the same eligible tuple for as long as the table and the replicas' health
stay put, so a plugin can build a hash ring or a cumulative weight table once per tuple instead
of once per request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_ENTRIES = 8


class IdentityMemo(Generic[K, V]):
    """Values keyed by the identity of a key object; holds the last `entries` keys.

    Keys must not be mutated while remembered (use tuples). An entry keeps its key alive, so an
    `id` cannot be reused by another object while its entry exists.
    """

    def __init__(self, entries: int = DEFAULT_ENTRIES) -> None:
        if entries < 1:
            raise ValueError("entries must be at least 1")
        self._entries = entries
        self._values: dict[int, tuple[K, V]] = {}

    def get(self, key: K, build: Callable[[K], V]) -> V:
        """The value remembered for `key`, or `build(key)`, remembered."""
        entry = self._values.get(id(key))
        if entry is not None:
            return entry[1]
        return self.put(key, build(key))

    def put(self, key: K, value: V) -> V:
        """Remember `value` for `key` (replacing any), forgetting the oldest entry when full."""
        self._values.pop(id(key), None)
        self._values[id(key)] = (key, value)
        if len(self._values) > self._entries:
            del self._values[next(iter(self._values))]
        return value
