"""API keys: kept hashed, matched in constant time, reloaded on change (a revoked key is refused
from the first request after one reload), limited per key (requests/s, output tokens/s, streams)
with 429 + Retry-After for that key only, and counted in metrics by key id, never by key."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from replica_server import ReplicaThread, replica
from router_harness import MODEL, ReplicaEntry, RouterThread, running_router

from orchestrator.admission.errors import Refused
from orchestrator.admission.keys import ApiKey, KeyFile, KeyLimits, KeyRing, digest_of, parse_keys
from orchestrator.admission.limits import KeyLimiter
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.frontends.http.auth import ApiKeys
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.sim.replica import ReplicaSettings

SECRET_A = "sk-test-alpha-0123456789"
SECRET_B = "sk-test-bravo-9876543210"
SECRET_C = "sk-test-charlie-5555555555"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def key(limits: KeyLimits, key_id: str = "k") -> ApiKey:
    return ApiKey(key_id, hashlib.sha256(key_id.encode()).digest(), limits)


# -- the file and the ring ------------------------------------------------------------------------


def test_keys_are_kept_as_digests_and_matched_whichever_form_the_file_uses() -> None:
    digest_b = hashlib.sha256(SECRET_B.encode()).hexdigest()
    keys = parse_keys(
        f"# team keys\n{SECRET_A} id=alpha rps=2 tokens_per_s=100 streams=3\n\n"
        f"sha256:{digest_b} id=bravo\n",
        "keys.txt",
    )
    assert [k.key_id for k in keys] == ["alpha", "bravo"]
    assert keys[0].limits == KeyLimits(requests_per_s=2, output_tokens_per_s=100, max_streams=3)
    assert not keys[1].limits.limited
    held = repr(keys) + "".join(str(vars(k) if hasattr(k, "__dict__") else k) for k in keys)
    assert SECRET_A not in held and SECRET_B not in held
    ring = KeyRing(keys)
    assert ring.match(SECRET_A) is keys[0]
    assert ring.match(SECRET_B) is keys[1]
    assert ring.match(SECRET_A + "x") is None
    assert ring.match("") is None


def test_a_ring_of_100000_keys_finds_each_by_digest_and_the_later_of_two_equal_keys_counts() -> (
    None
):
    keys = [ApiKey(f"k{i}", digest_of(f"sk-{i:06d}"), KeyLimits()) for i in range(100_000)]
    again = ApiKey("again", digest_of("sk-000007"), KeyLimits())
    ring = KeyRing([*keys, again])
    assert ring.match("sk-099999") is keys[-1]
    assert ring.match("sk-000007") is again
    assert ring.match("sk-100000") is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"{SECRET_A} rps=fast", "`rps` must be a number"),
        (f"{SECRET_A} rps=0", "`rps` must be > 0"),
        (f"{SECRET_A} colour=blue", "unknown field"),
        (f"{SECRET_A} id=a\n{SECRET_B} id=a", "used twice"),
        ("sha256:abc", "64 hex digits"),
        (f"{SECRET_A} streams", "expected name=value"),
        (f"{SECRET_A} rps=5 burst=0.5", "`burst` must be >= 1"),
        (f"{SECRET_A} tokens_per_s=5 token_burst=0.9", "`token_burst` must be >= 1"),
        (f"{SECRET_A} burst=10", "`burst` needs `rps` on the same line"),
        (f"{SECRET_A} token_burst=10", "`token_burst` needs `tokens_per_s` on the same line"),
    ],
)
def test_a_bad_line_is_named_by_number_and_never_echoes_the_key(text: str, problem: str) -> None:
    with pytest.raises(OrchestratorError) as error:
        parse_keys(text, "keys.txt")
    assert problem in error.value.message and "keys.txt line" in error.value.message
    assert SECRET_A not in error.value.message and SECRET_B not in error.value.message


def test_a_changed_file_is_reloaded_and_a_broken_one_keeps_the_previous_keys(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"{SECRET_A} id=alpha\n{SECRET_B} id=bravo\n")
    clock = Clock()
    keys = KeyFile(path, reload_interval_s=1.0, clock=clock)
    assert keys.ring().match(SECRET_B) is not None
    path.write_text(f"{SECRET_A} id=alpha\n")
    os.utime(path, ns=(1, 1))  # a new mtime even on a coarse clock
    assert keys.ring().match(SECRET_B) is not None  # not checked again within the interval
    clock.now += 1.0
    assert keys.ring().match(SECRET_B) is None and keys.reloads == 1
    path.write_text("sk-only rps=nope\n")
    os.utime(path, ns=(2, 2))
    clock.now += 1.0
    assert keys.ring().match(SECRET_A) is not None  # the broken file did not take effect
    assert keys.reloads == 1


# -- the limiter -----------------------------------------------------------------------------------


def test_requests_per_second_refill_and_the_refusal_says_when() -> None:
    clock = Clock()
    limiter = KeyLimiter(clock=clock)
    limited = key(KeyLimits(requests_per_s=2, request_burst=2))
    limiter.acquire(limited).finish(0)
    limiter.acquire(limited).finish(0)
    with pytest.raises(Refused) as refused:
        limiter.acquire(limited)
    assert refused.value.reason == "requests"
    assert 0.4 <= refused.value.retry_after_s <= 0.5
    clock.now += 0.5
    limiter.acquire(limited).finish(0)


def test_output_tokens_are_debited_when_the_answer_ends_and_a_key_in_debt_waits() -> None:
    clock = Clock()
    limiter = KeyLimiter(clock=clock)
    limited = key(KeyLimits(output_tokens_per_s=10, output_token_burst=10))
    limiter.acquire(limited).finish(40)  # 10 in the bucket, 40 spent: 30 in debt
    with pytest.raises(Refused) as refused:
        limiter.acquire(limited)
    assert refused.value.reason == "output_tokens"
    assert 3.0 <= refused.value.retry_after_s <= 3.2
    clock.now += 3.2
    limiter.acquire(limited).finish(0)


def test_streams_are_capped_and_a_finished_lease_frees_its_stream_once() -> None:
    limiter = KeyLimiter(clock=Clock())
    limited = key(KeyLimits(max_streams=2))
    first = limiter.acquire(limited)
    limiter.acquire(limited)
    with pytest.raises(Refused) as refused:
        limiter.acquire(limited)
    assert refused.value.reason == "streams"
    first.finish(0)
    first.finish(0)  # twice: still one stream freed
    limiter.acquire(limited)
    with pytest.raises(Refused):
        limiter.acquire(limited)


def test_per_key_state_is_bounded_and_forgets_revoked_keys() -> None:
    clock = Clock()
    limiter = KeyLimiter(max_keys=8, clock=clock)
    busy = key(KeyLimits(max_streams=5), "busy")
    limiter.acquire(busy)  # in progress: never evicted
    for index in range(100):
        limiter.acquire(key(KeyLimits(requests_per_s=1000), f"k{index}")).finish(0)
        clock.now += 0.01
    assert len(limiter) <= 8
    assert "busy" in limiter._states
    limiter.forget_except({"busy"})
    assert len(limiter) == 1


# -- end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def instant() -> Iterator[ReplicaThread]:
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=11)) as server:
        yield server


def post(router: RouterThread, secret: str, max_tokens: int = 20) -> tuple[int, dict[str, str]]:
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    body = {"model": MODEL, "prompt": "Say something.", "max_tokens": max_tokens,
            "ignore_eos": True}  # fmt: skip
    connection.request(
        "POST",
        "/v1/completions",
        json.dumps(body),
        {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    response = connection.getresponse()
    payload = json.loads(response.read())
    connection.close()
    headers = {name.lower(): value for name, value in response.getheaders()}
    if response.status != 200:
        assert set(payload["error"]) == {"message", "type", "param", "code"}
        assert payload["error"]["code"] == response.status
    return response.status, headers


def test_a_key_over_its_token_budget_gets_429_with_retry_after_and_others_are_unaffected(
    instant: ReplicaThread, tmp_path: Path
) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(
        f"{SECRET_A} id=alpha tokens_per_s=1 token_burst=5\n{SECRET_B} id=bravo\n"
        f"{SECRET_C} id=charlie rps=1 burst=1\n"
    )
    http = HttpSettings(api_keys=ApiKeys.from_file(path, reload_interval_s=0.0))
    with running_router([ReplicaEntry("i-0", instant.url)], http=http) as router:
        assert post(router, SECRET_A)[0] == 200  # 20 tokens out of a 5-token bucket: in debt
        status, headers = post(router, SECRET_A)
        assert status == 429 and int(headers["retry-after"]) >= 10
        for _ in range(3):
            assert post(router, SECRET_B)[0] == 200
        assert post(router, SECRET_C)[0] == 200
        status, headers = post(router, SECRET_C)
        assert status == 429 and int(headers["retry-after"]) >= 1
        assert post(router, SECRET_B)[0] == 200
        assert post(router, "sk-not-a-key")[0] == 401
        assert router.metric("orchestrator_router_key_requests_total", key_id="alpha",
                             outcome="output_tokens") == 1  # fmt: skip
        assert router.metric("orchestrator_router_key_output_tokens_total", key_id="alpha") == 20
        assert router.metric("orchestrator_router_key_requests_total", key_id="bravo",
                             outcome="admitted") == 4  # fmt: skip
        import urllib.request

        with urllib.request.urlopen(f"{router.metrics_url}/metrics", timeout=5) as page:
            text = page.read().decode()
        for secret in (SECRET_A, SECRET_B, SECRET_C):
            assert secret not in text
            assert hashlib.sha256(secret.encode()).hexdigest() not in text


def test_a_revoked_key_is_refused_from_the_first_request_after_one_reload(
    instant: ReplicaThread, tmp_path: Path
) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"{SECRET_A} id=alpha\n{SECRET_B} id=bravo tokens_per_s=1000\n")
    keys = ApiKeys.from_file(path, reload_interval_s=0.0)
    assert keys.file is not None
    with running_router(
        [ReplicaEntry("i-0", instant.url)], http=HttpSettings(api_keys=keys)
    ) as router:
        assert post(router, SECRET_B)[0] == 200
        assert "bravo" in router.service.key_limiter._states
        # As a Kubernetes Secret update does it: a new file swapped in for the old one.
        replacement = tmp_path / "keys.new"
        replacement.write_text(f"{SECRET_A} id=alpha\n")
        replacement.replace(path)
        assert post(router, SECRET_B)[0] == 401
        assert keys.file.reloads == 1
        assert post(router, SECRET_A)[0] == 200
        assert "bravo" not in router.service.key_limiter._states  # its state went with it
