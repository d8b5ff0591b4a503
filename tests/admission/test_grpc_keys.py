"""API keys on the gRPC port: with keys configured, every RouterService call must carry one in
`authorization: Bearer <key>` metadata, checked and reloaded as over HTTP and limited by the same
per-key state, so the gRPC port is no way around a key, a revocation or a budget. Health and
reflection stay open.

Real router (HTTP fast lane and gRPC server on one loop, loopback), real simulated replicas."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from replica_server import ReplicaThread, replica
from router_harness import MODEL, RouterThread, metric_value, replicas_document, wait_until
from router_harness import ReplicaEntry as Entry

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator._proto.orchestrator.router.v1 import router_pb2_grpc as pb_grpc
from orchestrator.core.generations import Generation
from orchestrator.frontends.grpc.server import GrpcServer, start_grpc_server
from orchestrator.frontends.grpc.servicer import SERVICE_NAME
from orchestrator.frontends.http.auth import ApiKeys
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.sim.replica import ReplicaSettings

ALPHA = "sk-grpc-alpha-0123456789"  # a 5-token budget refilled at 1 token/s
BRAVO = "sk-grpc-bravo-9876543210"  # unlimited
DELTA = "sk-grpc-delta-1111111111"  # one request in progress at a time
KEYS_FILE = (
    f"{ALPHA} id=alpha tokens_per_s=1 token_burst=5\n{BRAVO} id=bravo\n{DELTA} id=delta streams=1\n"
)
WRONG = "sk-grpc-not-a-key-000000"


class KeyedRouter:
    """A router requiring the keys in `keys_file`, serving HTTP (fast lane) and gRPC on one loop."""

    def __init__(self, replica_url: str, keys_file: Path) -> None:
        self.keys = ApiKeys.from_file(keys_file, reload_interval_s=0.0)
        self.http = RouterThread(
            replicas_document([Entry("r-0", replica_url)]), http=HttpSettings(api_keys=self.keys)
        )
        self.service = self.http.service
        self.service.use_api_keys(self.keys)
        self.http.start()
        self.grpc: GrpcServer = asyncio.run_coroutine_threadsafe(
            start_grpc_server(self.service, "127.0.0.1", 0), self.http._loop
        ).result(30)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc.port}")
        self.stub = pb_grpc.RouterServiceStub(self.channel)

    def stop(self) -> None:
        self.channel.close()
        asyncio.run_coroutine_threadsafe(self.grpc.stop(grace_s=0.5), self.http._loop).result(30)
        self.http.stop()

    def metric(self, name: str, **labels: str) -> float:
        return metric_value(self.http.url, name, **labels)


@pytest.fixture(scope="module")
def instant() -> Iterator[ReplicaThread]:
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=17)) as server:
        yield server


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text(KEYS_FILE)
    return path


@pytest.fixture
def router(instant: ReplicaThread, keys_file: Path) -> Iterator[KeyedRouter]:
    running = KeyedRouter(instant.url, keys_file)
    try:
        yield running
    finally:
        running.stop()


def bearer(secret: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {secret}"),)


def generate(
    router: KeyedRouter, metadata: tuple[tuple[str, str], ...] = (), max_tokens: int = 20
) -> list[pb.GenerateResponse]:
    request = pb.GenerateRequest(model=MODEL, prompt="Say something.", max_tokens=max_tokens,
                                 ignore_eos=True)  # fmt: skip
    return list(router.stub.Generate(request, metadata=metadata, timeout=15))


def refusal(call: object) -> grpc.RpcError:
    assert isinstance(call, grpc.RpcError), call
    return call


def generate_error(router: KeyedRouter, metadata: tuple[tuple[str, str], ...]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as error:
        generate(router, metadata)
    return refusal(error.value)


def post(router: KeyedRouter, secret: str, max_tokens: int = 20) -> int:
    host, port = router.http.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=15)
    body = {"model": MODEL, "prompt": "Say something.", "max_tokens": max_tokens,
            "ignore_eos": True}  # fmt: skip
    connection.request("POST", "/v1/completions", json.dumps(body),
                       {"Authorization": f"Bearer {secret}",
                        "Content-Type": "application/json"})  # fmt: skip
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status


CALLS: dict[str, Callable[[pb_grpc.RouterServiceStub, tuple[tuple[str, str], ...]], object]] = {
    # Empty requests: an empty Generate request would be INVALID_ARGUMENT, so a refusal for the
    # key shows the key is checked first.
    "Generate": lambda stub, metadata: list(
        stub.Generate(pb.GenerateRequest(), metadata=metadata, timeout=10)
    ),
    "ListModels": lambda stub, metadata: stub.ListModels(
        pb.ListModelsRequest(), metadata=metadata, timeout=10
    ),
    "CreateResponse": lambda stub, metadata: list(
        stub.CreateResponse(pb.CreateResponseRequest(), metadata=metadata, timeout=10)
    ),
    "GetResponse": lambda stub, metadata: stub.GetResponse(
        pb.GetResponseRequest(), metadata=metadata, timeout=10
    ),
}


def test_every_router_service_call_without_an_accepted_key_is_unauthenticated(
    router: KeyedRouter,
) -> None:
    methods = pb.DESCRIPTOR.services_by_name["RouterService"].methods
    assert {method.name for method in methods} == set(CALLS)  # a new RPC must be added here
    refused_metadata = [
        (),  # no key at all
        bearer(WRONG),
        (("authorization", f"Basic {BRAVO}"),),  # an accepted key, but not as a bearer token
        (("authorization", f"Bearer {WRONG}"), ("authorization", f"Bearer {BRAVO}")),  # two
        (("x-api-key", BRAVO),),  # HTTP takes no `X-Api-Key`; neither does gRPC
    ]
    for metadata in refused_metadata:
        for method in methods:
            with pytest.raises(grpc.RpcError) as error:
                CALLS[method.name](router.stub, metadata)
            refused = refusal(error.value)
            assert refused.code() is grpc.StatusCode.UNAUTHENTICATED, (method.name, metadata)
            assert "authorization: Bearer <key>" in (refused.details() or "")
            assert WRONG not in (refused.details() or "") and BRAVO not in (refused.details() or "")
    assert router.metric("orchestrator_router_requests_total", frontend="grpc",
                         code="UNAUTHENTICATED") == len(CALLS) * len(refused_metadata)  # fmt: skip
    assert router.metric("orchestrator_router_key_requests_total") == 0  # nothing reached a key


def test_health_and_reflection_stay_open_without_a_key(router: KeyedRouter) -> None:
    health = health_pb2_grpc.HealthStub(router.channel)
    for service in ("", SERVICE_NAME):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(router.channel)
    (listing,) = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    assert SERVICE_NAME in {s.name for s in listing.list_services_response.service}


def test_the_right_key_is_served_unary_and_streaming_and_counted_by_key_id(
    router: KeyedRouter,
) -> None:
    models = router.stub.ListModels(pb.ListModelsRequest(), metadata=bearer(BRAVO), timeout=10)
    assert [model.id for model in models.models] == [MODEL]
    messages = generate(router, bearer(BRAVO), max_tokens=12)
    assert sum(1 for m in messages if m.text) == 12
    assert messages[-1].finish_reason == "length" and messages[-1].completion_tokens == 12
    assert messages[0].replica.id == "r-0"
    # The scheme is case-insensitive, as HTTP's `Authorization` is.
    assert generate(router, (("authorization", f"bearer {BRAVO}"),), max_tokens=2)
    assert router.metric("orchestrator_router_key_requests_total", key_id="bravo",
                         outcome="admitted") == 2  # fmt: skip
    assert router.metric("orchestrator_router_key_output_tokens_total", key_id="bravo") == 14
    with urllib.request.urlopen(f"{router.http.metrics_url}/metrics", timeout=5) as page:
        text = page.read().decode()
    for secret in (ALPHA, BRAVO, DELTA):
        assert secret not in text
        assert hashlib.sha256(secret.encode()).hexdigest() not in text


def test_a_revoked_key_is_refused_over_grpc_from_the_first_call_after_one_reload(
    router: KeyedRouter, keys_file: Path
) -> None:
    assert generate(router, bearer(BRAVO), max_tokens=2)
    assert "bravo" in router.service.key_limiter._states
    # As a Kubernetes Secret update does it: a new file swapped in for the old one.
    replacement = keys_file.with_name("keys.new")
    replacement.write_text(KEYS_FILE.replace(f"{BRAVO} id=bravo\n", ""))
    replacement.replace(keys_file)
    assert generate_error(router, bearer(BRAVO)).code() is grpc.StatusCode.UNAUTHENTICATED
    assert router.keys.file is not None and router.keys.file.reloads == 1
    assert generate(router, bearer(DELTA), max_tokens=2)
    assert post(router, BRAVO) == 401  # the same reload, seen by HTTP
    assert router.keys.file.reloads == 1
    assert "bravo" not in router.service.key_limiter._states  # its state went with it


def test_a_key_over_its_token_budget_is_resource_exhausted_with_retry_after_others_are_served(
    router: KeyedRouter,
) -> None:
    assert generate(router, bearer(ALPHA))  # 20 tokens out of a 5-token bucket: 15 in debt
    started = time.monotonic()
    refused = generate_error(router, bearer(ALPHA))
    assert time.monotonic() - started < 2.0  # refused at once, not queued
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "alpha" in (refused.details() or "") and ALPHA not in (refused.details() or "")
    trailers = dict(refused.trailing_metadata() or ())
    assert int(trailers["retry-after"]) >= 10  # 15 tokens of debt at 1 token/s
    for _ in range(3):
        assert generate(router, bearer(BRAVO), max_tokens=4)
    assert router.metric("orchestrator_router_key_requests_total", key_id="alpha",
                         outcome="output_tokens") == 1  # fmt: skip
    assert router.metric("orchestrator_router_requests_total", frontend="grpc",
                         code="RESOURCE_EXHAUSTED") == 1  # fmt: skip


def test_a_budget_spent_over_http_is_refused_over_grpc(router: KeyedRouter) -> None:
    assert post(router, ALPHA) == 200  # 20 tokens over HTTP: the 5-token bucket is in debt
    refused = generate_error(router, bearer(ALPHA))
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert int(dict(refused.trailing_metadata() or ())["retry-after"]) >= 10
    assert generate(router, bearer(BRAVO), max_tokens=2)  # another key is unaffected
    assert post(router, ALPHA) == 429  # and HTTP sees the same debt


@pytest.fixture(scope="module")
def realtime() -> Iterator[ReplicaThread]:
    """Wall-clock steps: a 5,000-token answer lasts far longer than the test."""
    with replica(ReplicaSettings(Generation.MI300X, time_scale=1.0, seed=23)) as server:
        yield server


def test_a_stream_open_over_grpc_counts_against_the_keys_streams_over_http(
    realtime: ReplicaThread, keys_file: Path
) -> None:
    running = KeyedRouter(realtime.url, keys_file)
    try:
        request = pb.GenerateRequest(model=MODEL, prompt="Tell me everything.", max_tokens=5000,
                                     ignore_eos=True)  # fmt: skip
        stream = running.stub.Generate(request, metadata=bearer(DELTA), timeout=30)
        assert next(stream).text  # admitted and under way: delta's one stream is taken
        assert post(running, DELTA, max_tokens=1) == 429
        assert running.metric("orchestrator_router_key_requests_total", key_id="delta",
                              outcome="streams") == 1  # fmt: skip
        stream.cancel()
        assert wait_until(
            lambda: running.metric("orchestrator_router_key_streams", key_id="delta") == 0, 5
        )
        assert post(running, DELTA, max_tokens=1) == 200
    finally:
        running.stop()


def test_keys_given_to_the_http_app_alone_also_guard_the_grpc_port(
    instant: ReplicaThread, keys_file: Path
) -> None:
    """What `orchestrator router --api-keys-file` does: keys in the HTTP settings, gRPC beside."""
    keys = ApiKeys.from_file(keys_file, reload_interval_s=0.0)
    http = RouterThread(
        replicas_document([Entry("r-0", instant.url)]), http=HttpSettings(api_keys=keys)
    ).start()
    server = asyncio.run_coroutine_threadsafe(
        start_grpc_server(http.service, "127.0.0.1", 0), http._loop
    ).result(30)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pb_grpc.RouterServiceStub(channel)
            with pytest.raises(grpc.RpcError) as error:
                stub.ListModels(pb.ListModelsRequest(), timeout=10)
            assert refusal(error.value).code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(grace_s=0.5), http._loop).result(30)
        http.stop()


def test_a_key_in_debt_is_refused_a_stored_response_lookup_before_it_runs(
    router: KeyedRouter,
) -> None:
    assert generate(router, bearer(ALPHA))  # 20 tokens out of a 5-token bucket: 15 in debt
    with pytest.raises(grpc.RpcError) as refused:
        router.stub.GetResponse(
            pb.GetResponseRequest(id="resp_" + "0" * 32), metadata=bearer(ALPHA), timeout=10
        )
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert int(dict(refused.value.trailing_metadata() or ())["retry-after"]) >= 10
    with pytest.raises(grpc.RpcError) as unknown:
        router.stub.GetResponse(
            pb.GetResponseRequest(id="resp_" + "0" * 32), metadata=bearer(BRAVO), timeout=10
        )
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
