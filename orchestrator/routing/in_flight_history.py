"""What one router had in flight on one replica a moment ago.

A load report counts the engine's requests when it was scraped, up to a second or two before the
router reads it; the router's own in-flight has moved since. Subtracting the in-flight of *now*
from the engine's count would miscount the other routers' share by every request this router sent
or finished in between (a report that arrives just after a burst reads as other routers having
none). Keeping the last few seconds of changes lets the router subtract what it had in flight at
the scrape instead.

A replica that takes a thousand requests a second holds thousands of changes in the window, read
at each of its reports: a lookup bisects the change times (O(log n)) instead of walking back from
the newest, and changes that left the window are cut off in batches, not one per change.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

_MIN_COMPACT = 64  # changes held before the first cut


class InFlightHistory:
    """The changes of the last `window_s` before the newest one, as (time, in-flight from then
    on), and the value before the oldest of them; a moment older than the window reads as that
    value. Changes arrive in time order (the router's monotonic clock)."""

    __slots__ = ("_before", "_compact_at", "_times", "_values", "_window_s")

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._times: list[float] = []
        self._values: list[int] = []
        self._before = 0  # in flight before the first change held
        self._compact_at = _MIN_COMPACT

    def changed(self, now_s: float, in_flight: int) -> None:
        times = self._times
        times.append(now_s)
        self._values.append(in_flight)
        if len(times) >= self._compact_at:
            first = self._first_kept()
            if first:
                self._before = self._values[first - 1]
                del times[:first], self._values[:first]
            self._compact_at = max(_MIN_COMPACT, 2 * len(times))

    def at(self, when_s: float) -> int:
        """In flight at `when_s` (the value set by the last change at or before it, within the
        window)."""
        first = self._first_kept()
        index = bisect_right(self._times, when_s, first) - 1
        if index >= first:
            return self._values[index]
        return self._values[first - 1] if first else self._before

    def _first_kept(self) -> int:
        """The index of the oldest change within the window of the newest (the ones before it
        are held only until the next cut)."""
        times = self._times
        return bisect_left(times, times[-1] - self._window_s) if times else 0
