"""Per-key limits: a requests/s token bucket, an output-tokens/s token bucket and a cap on
requests in progress, each refused with 429 and the seconds until it would pass.

Output tokens are known only once an answer ends, so that bucket is debited then and may go
into debt; a key in debt is refused until the refill pays it back. State is kept per key id in a
table of at most `max_keys` entries; when it is full the least recently used idle entry goes
(an idle key's buckets are full again soon anyway, and a key with requests in progress is
never evicted).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from orchestrator.admission.errors import Refused
from orchestrator.admission.keys import ApiKey, KeyLimits
from orchestrator.admission.metrics import AdmissionMetrics
from orchestrator.core.errors import ErrorCode, OrchestratorError

DEFAULT_MAX_KEYS: Final = 10_000


def check_background(key: ApiKey) -> None:
    """Refuse a `background` response for a key with an output-token limit: it answers before
    its tokens exist, so they could count neither against the limit nor in admission."""
    if key.limits.output_tokens_per_s is not None:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"`background` responses are not available to key {key.key_id!r}: it has an "
            "output-token limit, which a background response's tokens would not count against",
            param="background",
        )


class TokenBucket:
    """`rate` tokens a second up to `burst`; starts full."""

    __slots__ = ("burst", "level", "rate", "updated_s")

    def __init__(self, rate: float, burst: float, now_s: float) -> None:
        self.rate = rate
        self.burst = burst
        self.level = burst
        self.updated_s = now_s

    def refill(self, now_s: float) -> None:
        if now_s > self.updated_s:
            self.level = min(self.burst, self.level + (now_s - self.updated_s) * self.rate)
            self.updated_s = now_s

    def wait_s(self, need: float) -> float:
        """Seconds until `need` tokens are there (0 when they are now)."""
        return max(0.0, (need - self.level) / self.rate)

    def full(self) -> bool:
        return self.level >= self.burst


class _KeyState:
    """One key's buckets and streams, with the limits they were built from: a reloaded keys file
    that changes a key's limits rebuilds its buckets on the key's next request."""

    __slots__ = ("limits", "requests", "streams", "tokens")

    def __init__(self, limits: KeyLimits, now_s: float) -> None:
        self.limits = limits
        self.requests: TokenBucket | None = None
        self.tokens: TokenBucket | None = None
        self.streams = 0
        self._build(now_s)

    def apply(self, limits: KeyLimits, now_s: float) -> None:
        """Rebuild the buckets for new `limits`, keeping the streams in progress and each kept
        bucket's level (capped at its new burst, debt kept) so a reload grants no fresh burst."""
        if limits == self.limits:
            return
        old_requests, old_tokens = self.requests, self.tokens
        self.limits = limits
        self._build(now_s)
        for old, new in ((old_requests, self.requests), (old_tokens, self.tokens)):
            if old is not None and new is not None:
                old.refill(now_s)
                new.level = min(new.burst, old.level)

    def _build(self, now_s: float) -> None:
        limits = self.limits
        self.requests = self.tokens = None
        if limits.requests_per_s is not None:
            burst = limits.request_burst or max(1.0, limits.requests_per_s)
            self.requests = TokenBucket(limits.requests_per_s, burst, now_s)
        if limits.output_tokens_per_s is not None:
            burst = limits.output_token_burst or max(1.0, limits.output_tokens_per_s)
            self.tokens = TokenBucket(limits.output_tokens_per_s, burst, now_s)

    def idle(self, now_s: float) -> bool:
        for bucket in (self.requests, self.tokens):
            if bucket is not None:
                bucket.refill(now_s)
                if not bucket.full():
                    return False
        return self.streams == 0


class KeyLease:
    """A request admitted under a key; `finish(output_tokens)` once it ended (once)."""

    __slots__ = ("_key", "_limiter", "_state")

    def __init__(self, limiter: KeyLimiter, key: ApiKey, state: _KeyState) -> None:
        self._limiter = limiter
        self._key = key
        self._state: _KeyState | None = state

    def finish(self, output_tokens: int) -> None:
        state, self._state = self._state, None
        if state is not None:
            self._limiter.finished(self._key, state, output_tokens)


class KeyLimiter:
    """Applies each key's limits; one per router process."""

    def __init__(
        self,
        metrics: AdmissionMetrics | None = None,
        *,
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self._metrics = metrics
        self.max_keys = max_keys
        self._clock = clock
        self._states: OrderedDict[str, _KeyState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    def acquire(self, key: ApiKey) -> KeyLease:
        """Count a request against `key`'s limits, or raise `Refused` naming the limit."""
        now_s = self._clock()
        state = self._states.get(key.key_id)
        if state is None:
            state = self._states[key.key_id] = _KeyState(key.limits, now_s)
            self._evict(now_s)
        else:
            self._states.move_to_end(key.key_id)
            state.apply(key.limits, now_s)
        limits = key.limits
        if limits.max_streams is not None and state.streams >= limits.max_streams:
            raise self._refuse(key, "streams", 1.0, f"{limits.max_streams} requests in progress")
        if state.tokens is not None:
            state.tokens.refill(now_s)
            if state.tokens.level <= 0:
                wait_s = state.tokens.wait_s(1.0)
                raise self._refuse(key, "output_tokens", wait_s, "its output tokens per second")
        if state.requests is not None:
            state.requests.refill(now_s)
            if state.requests.level < 1.0:
                wait_s = state.requests.wait_s(1.0)
                raise self._refuse(key, "requests", wait_s, "its requests per second")
            state.requests.level -= 1.0
        state.streams += 1
        if self._metrics is not None:
            self._metrics.key_requests.labels(key.key_id, "admitted").inc()
            self._metrics.key_streams.labels(key.key_id).set(state.streams)
        return KeyLease(self, key, state)

    def finished(self, key: ApiKey, state: _KeyState, output_tokens: int) -> None:
        state.streams = max(0, state.streams - 1)
        if state.tokens is not None and output_tokens > 0:
            state.tokens.refill(self._clock())
            state.tokens.level -= output_tokens
        if self._metrics is not None:
            self._metrics.key_streams.labels(key.key_id).set(state.streams)
            if output_tokens > 0:
                self._metrics.key_output_tokens.labels(key.key_id).inc(output_tokens)

    def forget_except(self, key_ids: set[str]) -> None:
        """Drop the state (and metric series) of keys no longer in the keys file."""
        for key_id in [k for k in self._states if k not in key_ids]:
            del self._states[key_id]
            if self._metrics is not None:
                self._metrics.forget_key(key_id)

    def _evict(self, now_s: float) -> None:
        if len(self._states) <= self.max_keys:
            return
        for key_id in list(self._states):
            if len(self._states) <= self.max_keys:
                return
            if self._states[key_id].idle(now_s):
                del self._states[key_id]

    def _refuse(self, key: ApiKey, limit: str, wait_s: float, what: str) -> Refused:
        if self._metrics is not None:
            self._metrics.key_requests.labels(key.key_id, limit).inc()
        return Refused(
            f"API key {key.key_id!r} is over {what}; retry after the time in the Retry-After"
            " header.",
            retry_after_s=wait_s,
            reason=limit,
        )
