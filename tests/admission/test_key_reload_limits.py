"""A reloaded keys file's new limits apply to a key the limiter already holds state for: an
added rate starts limiting, a lowered one takes effect after one reload, and the requests in
progress stay counted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.admission.errors import Refused
from orchestrator.admission.keys import ApiKey, KeyFile
from orchestrator.admission.limits import KeyLimiter

SECRET = "sk-test-reload-0123456789"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rewrite(path: Path, text: str, stamp: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(stamp, stamp))  # a new mtime even on a coarse clock


def current(keys: KeyFile) -> ApiKey:
    found = keys.ring().match(SECRET)
    assert found is not None
    return found


def test_a_rate_added_by_a_reload_limits_a_key_already_seen(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    rewrite(path, f"{SECRET} id=team\n", 1)
    clock = Clock()
    keys = KeyFile(path, reload_interval_s=1.0, clock=clock)
    limiter = KeyLimiter(clock=clock)
    for _ in range(5):
        limiter.acquire(current(keys)).finish(0)  # unlimited: state exists, no bucket
    rewrite(path, f"{SECRET} id=team rps=1 burst=1\n", 2)
    clock.now += 1.0
    limiter.acquire(current(keys)).finish(0)
    with pytest.raises(Refused) as refused:
        limiter.acquire(current(keys))
    assert refused.value.reason == "requests"
    assert keys.reloads == 1


def test_a_lowered_rate_takes_effect_after_one_reload(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    rewrite(path, f"{SECRET} id=team rps=100 burst=100\n", 1)
    clock = Clock()
    keys = KeyFile(path, reload_interval_s=1.0, clock=clock)
    limiter = KeyLimiter(clock=clock)
    for _ in range(10):
        limiter.acquire(current(keys)).finish(0)
    rewrite(path, f"{SECRET} id=team rps=1 burst=2\n", 2)
    clock.now += 1.0  # the old bucket refills to 100 meanwhile; the new burst caps it at 2
    limiter.acquire(current(keys)).finish(0)
    limiter.acquire(current(keys)).finish(0)
    with pytest.raises(Refused) as refused:
        limiter.acquire(current(keys))
    assert 0.9 <= refused.value.retry_after_s <= 1.0  # the new rate: one request a second
    assert keys.reloads == 1


def test_a_lowered_token_rate_keeps_the_debt_and_streams_in_progress(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    rewrite(path, f"{SECRET} id=team tokens_per_s=1000 streams=2\n", 1)
    clock = Clock()
    keys = KeyFile(path, reload_interval_s=1.0, clock=clock)
    limiter = KeyLimiter(clock=clock)
    in_progress = limiter.acquire(current(keys))
    limiter.acquire(current(keys)).finish(3000)  # 2000 tokens in debt
    rewrite(path, f"{SECRET} id=team tokens_per_s=10 token_burst=10 streams=1\n", 2)
    clock.now += 1.0  # 1000 tokens still owed, paid back in ~1 s at the old rate
    with pytest.raises(Refused) as refused:
        limiter.acquire(current(keys))
    assert refused.value.reason == "streams"  # the stream in progress still counts
    in_progress.finish(0)
    with pytest.raises(Refused) as refused:
        limiter.acquire(current(keys))
    assert refused.value.reason == "output_tokens"
    assert refused.value.retry_after_s > 50.0  # at the new rate, 10 tokens a second
