"""What one router had in flight on one replica a moment ago.

A load report counts the engine's requests when it was scraped, up to a second or two before the
router reads it; the router's own in-flight has moved since. Subtracting the in-flight of *now*
from the engine's count would miscount the other routers' share by every request this router sent
or finished in between (a report that arrives just after a burst reads as other routers having
none). Keeping the last few seconds of changes lets the router subtract what it had in flight at
the scrape instead.
"""

from __future__ import annotations

from collections import deque


class InFlightHistory:
    """The changes of the last `window_s` as (time, in-flight from then on), and the value before
    the oldest one kept; a moment older than the window reads as that value."""

    __slots__ = ("_before", "_changes", "_window_s")

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._changes: deque[tuple[float, int]] = deque()
        self._before = 0

    def changed(self, now_s: float, in_flight: int) -> None:
        changes = self._changes
        changes.append((now_s, in_flight))
        oldest_s = now_s - self._window_s
        while changes[0][0] < oldest_s:
            self._before = changes.popleft()[1]

    def at(self, when_s: float) -> int:
        """In flight at `when_s` (the value set by the last change at or before it)."""
        for time_s, value in reversed(self._changes):
            if time_s <= when_s:
                return value
        return self._before
