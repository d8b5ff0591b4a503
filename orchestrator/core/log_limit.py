"""Logging that a client can trigger at will, bounded: at most `burst` records per `period_s`,
then one record saying how many were left out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """`log(message, *args)` at `level` on `logger`, at most `burst` times per `period_s`."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int = logging.INFO,
        *,
        burst: int = 10,
        period_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._burst = burst
        self._period_s = period_s
        self._clock = clock
        self._window_s = float("-inf")
        self._logged = 0
        self._left_out = 0

    def __call__(self, message: str, *args: object) -> None:
        if not self._logger.isEnabledFor(self._level):
            return
        now_s = self._clock()
        if now_s - self._window_s >= self._period_s:
            if self._left_out:
                self._logger.log(
                    self._level, "%d more like this left out in %.0f s", self._left_out,
                    self._period_s,
                )  # fmt: skip
            self._window_s, self._logged, self._left_out = now_s, 0, 0
        if self._logged < self._burst:
            self._logged += 1
            self._logger.log(self._level, message, *args)
        else:
            self._left_out += 1
