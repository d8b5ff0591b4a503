"""Each pool's learned capacity over time, and the steps in it that no change of size explains.

A software upgrade (a new ROCm, a new engine build) moves what a replica sustains: the online
estimator follows, and this keeps the trail. Samples are taken at most once per `interval_s` per
pool and kept for `2 × window_s`, so memory is bounded by the window, not by how long the control
plane runs. A step change is declared when the mean capacity per replica over the last `window_s`
differs from the mean over the `window_s` before it by more than `threshold` (either way), and the
pool kept the same number of replicas across both windows: a pool that grew or shrank is not a
software change. After a step, the trail restarts from the sample that completed it, so one upgrade
counts once and the next step is measured from the new level.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 5.0
DEFAULT_WINDOW_S = 60.0
DEFAULT_THRESHOLD = 0.15


@dataclass(frozen=True, slots=True)
class CapacitySample:
    """A pool's learned capacity at one moment: the sum over its replicas with an estimate."""

    at_s: float
    replicas: int
    tokens_per_s: float

    @property
    def per_replica(self) -> float:
        return self.tokens_per_s / self.replicas if self.replicas else 0.0


@dataclass(frozen=True, slots=True)
class StepChange:
    """A move in capacity per replica from `before` to `after` (tokens/s), found at `at_s`."""

    at_s: float
    replicas: int
    before_tokens_per_s: float
    after_tokens_per_s: float

    @property
    def ratio(self) -> float:
        return self.after_tokens_per_s / self.before_tokens_per_s


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """What an operator reads about one pool's capacity: the newest sample, how many steps were
    found since the control plane started, and the last of them."""

    latest: CapacitySample
    step_changes_total: int
    last_step: StepChange | None


@dataclass(slots=True)
class _Trail:
    samples: deque[CapacitySample]
    step_changes_total: int = 0
    last_step: StepChange | None = None


class CapacityHistory:
    """Samples per pool and the step detector described in the module docstring."""

    def __init__(
        self,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        window_s: float = DEFAULT_WINDOW_S,
        threshold: float = DEFAULT_THRESHOLD,
    ) -> None:
        if not 0 < interval_s <= window_s:
            raise ValueError(f"need 0 < interval_s <= window_s, got {interval_s}, {window_s}")
        if not threshold > 0:
            raise ValueError(f"threshold must be > 0, got {threshold}")
        self._interval_s = interval_s
        self._window_s = window_s
        self._threshold = threshold
        # Two windows of samples, one apart each, and a spare: the bound on memory per pool.
        self._max_samples = int(2 * window_s / interval_s) + 2
        self._trails: dict[str, _Trail] = {}

    def due(self, pool: str, now_s: float) -> bool:
        """Whether `pool` should be sampled now (none yet, or the last one `interval_s` ago)."""
        trail = self._trails.get(pool)
        return (
            trail is None or not trail.samples or now_s - trail.samples[-1].at_s >= self._interval_s
        )

    def record(self, pool: str, sample: CapacitySample) -> StepChange | None:
        """Add a sample; returns the step change it completes, if any."""
        trail = self._trails.get(pool)
        if trail is None:
            trail = _Trail(deque(maxlen=self._max_samples))
            self._trails[pool] = trail
        samples = trail.samples
        samples.append(sample)
        while samples and samples[0].at_s < sample.at_s - 2 * self._window_s:
            samples.popleft()
        step = self._step(samples, sample.at_s)
        if step is not None:
            trail.step_changes_total += 1
            trail.last_step = step
            samples.clear()
            samples.append(sample)
        return step

    def forget(self, pool: str) -> None:
        self._trails.pop(pool, None)

    def samples(self, pool: str) -> tuple[CapacitySample, ...]:
        trail = self._trails.get(pool)
        return () if trail is None else tuple(trail.samples)

    def pools(self) -> Mapping[str, PoolCapacity]:
        return {
            name: PoolCapacity(trail.samples[-1], trail.step_changes_total, trail.last_step)
            for name, trail in self._trails.items()
            if trail.samples
        }

    def _step(self, samples: deque[CapacitySample], now_s: float) -> StepChange | None:
        if samples[0].at_s > now_s - 2 * self._window_s + self._interval_s:
            return None  # not two whole windows yet
        recent = [s for s in samples if s.at_s > now_s - self._window_s]
        earlier = [s for s in samples if s.at_s <= now_s - self._window_s]
        if not recent or not earlier or len({s.replicas for s in samples}) != 1:
            return None
        if samples[0].replicas == 0:
            return None
        before = sum(s.per_replica for s in earlier) / len(earlier)
        after = sum(s.per_replica for s in recent) / len(recent)
        if before <= 0 or abs(after / before - 1.0) <= self._threshold:
            return None
        return StepChange(now_s, samples[-1].replicas, before, after)
