"""The router's gRPC API as a client sees it: real stubs, a real router, real simulated replicas.

Each router runs with its gRPC server in its own thread and event loop, on port 0; the tests call
it with the generated synchronous stubs. Instant replicas (time scale 0) answer as fast as the CPU
allows; a real-time replica serves a separate model for the tests that need a request to last.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

import grpc
import pytest
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from replica_server import ReplicaThread, replica

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator._proto.orchestrator.router.v1 import router_pb2_grpc as pb_grpc
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.core.records import ReplicaState
from orchestrator.frontends.grpc.server import GrpcServer, GrpcSettings, start_grpc_server
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.sim.replica import ReplicaSettings, build_app
from orchestrator.table.snapshot import RoutingTable
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

MODEL = "openai/gpt-oss-120b"
SLOW_MODEL = "openai/gpt-oss-120b-realtime"
SERVICE = "orchestrator.router.v1.RouterService"
T = TypeVar("T")

pytestmark = pytest.mark.timeout(120)


# -- harness --------------------------------------------------------------------------------------


class AppReplica(ReplicaThread):
    """Any aiohttp app served like a simulated replica (its own thread and loop, port 0)."""

    def __init__(self, make_app: Callable[[], web.Application]) -> None:
        super().__init__(ReplicaSettings(Generation.MI355X))
        self._make_app = make_app

    async def _start(self) -> None:
        self.app = self._make_app()
        self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"


class RecordingReplica(AppReplica):
    """A simulated replica that also keeps the JSON body of every completion request it gets."""

    def __init__(self, settings: ReplicaSettings) -> None:
        super().__init__(self._recording_app)
        self.settings = settings
        self.bodies: list[dict[str, Any]] = []

    def _recording_app(self) -> web.Application:
        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.method == "POST":
                self.bodies.append(json.loads(await request.read()))
            return await handler(request)

        app = build_app(self.settings)
        app.middlewares.insert(0, record)
        return app


def failing_replica_app() -> web.Application:
    """A replica that is full for "busy" and breaks its connection after one chunk otherwise."""

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["messages"][0]["content"] == "busy":
            error = {"message": "the engine is full", "type": "RateLimitError", "code": 429}
            return web.json_response({"error": error}, status=429)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return response

    async def ok(request: web.Request) -> web.Response:
        return web.Response(
            text="vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
            "vllm:kv_cache_usage_perc 0\nvllm:generation_tokens_total 0\n"
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/health", ok)
    app.router.add_get("/metrics", ok)
    return app


def replicas_document(entries: list[tuple[str, ReplicaThread, str, str]]) -> str:
    """A replicas file: (id, replica, generation, model) per entry."""
    lines = [f"apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: {MODEL}\nreplicas:"]
    for replica_id, server, generation, model in entries:
        lines.append(
            f'  - {{id: {replica_id}, url: "{server.url}", pool: lab-{generation.lower()}, '
            f"site: lab, generation: {generation}, engine: sim, model: {model}}}"
        )
    return "\n".join(lines) + "\n"


class GrpcRouter:
    """A `RouterService` and its gRPC server, served from a background thread's event loop."""

    def __init__(
        self,
        table: RoutingTable,
        settings: RouterSettings | None = None,
        grpc_settings: GrpcSettings | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.table = TableHolder(table)
        self.service = RouterService(
            self.table, profile_named("capacity"), settings=settings or RouterSettings()
        )
        self.server: GrpcServer = self.call(lambda: self._start(grpc_settings))
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.port}")
        self.stub = pb_grpc.RouterServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    async def _start(self, grpc_settings: GrpcSettings | None) -> GrpcServer:
        await self.service.start()
        return await start_grpc_server(self.service, "127.0.0.1", 0, grpc_settings)

    def submit(self, make: Callable[[], Awaitable[T]]) -> Future[T]:
        """Run a coroutine on the router's loop; returns at once."""

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def call(self, make: Callable[[], Awaitable[T]], timeout_s: float = 30.0) -> T:
        """Run a coroutine on the router's loop and wait for its result."""
        return self.submit(make).result(timeout_s)

    def health_status(self, service: str = "") -> int:
        request = health_pb2.HealthCheckRequest(service=service)
        return int(self.health.Check(request, timeout=5).status)

    def close(self) -> None:
        self.channel.close()

        async def stop() -> None:
            await self.server.stop(grace_s=1.0)
            await self.service.stop()

        self.call(stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


@contextmanager
def grpc_router(document: str, **kwargs: Any) -> Iterator[GrpcRouter]:
    router = GrpcRouter(parse_replicas(document), **kwargs)
    try:
        yield router
    finally:
        router.close()


@pytest.fixture(scope="module")
def instant() -> Iterator[RecordingReplica]:
    server = RecordingReplica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=3)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def realtime() -> Iterator[ReplicaThread]:
    """An MI300X replica at wall-clock speed: a long completion takes seconds."""
    settings = ReplicaSettings(Generation.MI300X, model_name=SLOW_MODEL, time_scale=1.0, seed=4)
    with replica(settings) as server:
        yield server


@pytest.fixture(scope="module")
def router(instant: RecordingReplica, realtime: ReplicaThread) -> Iterator[GrpcRouter]:
    document = replicas_document(
        [("mi355x-0", instant, "MI355X", MODEL), ("mi300x-rt", realtime, "MI300X", SLOW_MODEL)]
    )
    with grpc_router(document) as running:
        yield running


def chat(content: str = "Say something.", **fields: Any) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        model=fields.pop("model", MODEL),
        messages=[pb.ChatMessage(role="user", content=content)],
        **fields,
    )


def generate(
    router: GrpcRouter, request: pb.GenerateRequest, timeout_s: float | None = 30.0
) -> list[pb.GenerateResponse]:
    return list(router.stub.Generate(request, timeout=timeout_s))


def status_of(
    router: GrpcRouter, request: pb.GenerateRequest, timeout_s: float | None = 30.0
) -> Any:
    with pytest.raises(grpc.RpcError) as caught:
        generate(router, request, timeout_s)
    return caught.value


def replica_running(base_url: str) -> float:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:num_requests_running"
    )


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


# -- Generate -------------------------------------------------------------------------------------


def test_generate_streams_a_chat_and_ends_with_usage_and_finish_reason(
    router: GrpcRouter,
) -> None:
    messages = generate(router, chat(max_tokens=12, ignore_eos=True))
    assert len(messages) >= 2
    assert "".join(m.text for m in messages)
    first, last = messages[0], messages[-1]
    assert first.replica == pb.ReplicaInfo(id="mi355x-0", pool="lab-mi355x", generation="MI355X")
    assert last.finish_reason == "length"
    assert last.usage.completion_tokens == 12
    assert last.usage.prompt_tokens > 0
    assert last.completion_tokens == 12
    counts = [m.completion_tokens for m in messages]
    assert counts == sorted(counts)
    assert not any(m.finish_reason for m in messages[:-1])


def test_generate_streams_a_text_prompt_and_a_token_id_prompt(
    router: GrpcRouter, instant: RecordingReplica
) -> None:
    for request in (
        pb.GenerateRequest(model=MODEL, prompt="Once upon a time", max_tokens=5, ignore_eos=True),
        pb.GenerateRequest(model=MODEL, prompt_token_ids=[1, 2, 3, 4], max_tokens=5, seed=1),
    ):
        messages = generate(router, request)
        assert messages[-1].finish_reason in {"length", "stop"}
        assert messages[-1].usage.completion_tokens == messages[-1].completion_tokens > 0
        assert "".join(m.text for m in messages)
    sent = instant.bodies[-2:]
    assert [("prompt" in body, body["stream"]) for body in sent] == [(True, True)] * 2
    assert sent[1]["prompt"] == [1, 2, 3, 4]


def test_gpt_oss_fields_reach_the_replica_unchanged(
    router: GrpcRouter, instant: RecordingReplica
) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
                "strict": True,
            },
        }
    ]
    request = chat(
        "Weather in Seoul?",
        max_tokens=4,
        reasoning_effort="high",
        tools_json=json.dumps(tools),
        temperature=0.7,
        top_p=0.9,
        stop=["###"],
        priority=pb.PRIORITY_BATCH,
        client_site="lab",
    )
    assert generate(router, request)[-1].finish_reason
    body = instant.bodies[-1]
    assert body["reasoning_effort"] == "high"
    assert body["tools"] == tools
    assert body["messages"] == [{"role": "user", "content": "Weather in Seoul?"}]
    assert (body["temperature"], body["top_p"], body["stop"]) == (0.7, 0.9, ["###"])
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.GenerateRequest(prompt="hello"), "model"),
        (pb.GenerateRequest(model=MODEL), "messages"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(max_tokens=-1), "max_tokens"),
        (chat(tools_json="not json"), "tools_json"),
    ],
)
def test_bad_requests_are_invalid_argument_naming_the_field(
    router: GrpcRouter, request_: pb.GenerateRequest, field: str
) -> None:
    error = status_of(router, request_)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.details()


def test_what_the_replica_rejects_is_invalid_argument(router: GrpcRouter) -> None:
    error = status_of(router, chat(reasoning_effort="extreme"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "reasoning_effort" in error.details()
    too_long = status_of(router, chat(max_tokens=10_000_000))
    assert too_long.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "context length" in too_long.details()


def test_an_unknown_model_is_not_found(router: GrpcRouter) -> None:
    error = status_of(router, chat(model="no-such-model"))
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert "no-such-model" in error.details()


def test_answers_are_counted_by_frontend_and_grpc_code(instant: RecordingReplica) -> None:
    with grpc_router(replicas_document([("mi355x-0", instant, "MI355X", MODEL)])) as router:

        def counts() -> tuple[float | None, ...]:
            get = router.service.registry.get_sample_value
            name = "orchestrator_router_requests_total"
            return tuple(get(name, {"frontend": "grpc", "code": c}) for c in ("OK", "NOT_FOUND"))

        generate(router, chat(max_tokens=1))
        status_of(router, chat(model="no-such-model"))
        # Counted as the call ends on the server, just after the client has its answer.
        assert wait_until(lambda: counts() == (1.0, 1.0), timeout_s=5), counts()


def test_a_full_replica_is_resource_exhausted_and_a_broken_stream_unavailable() -> None:
    failing = AppReplica(failing_replica_app).start()
    try:
        with grpc_router(replicas_document([("flaky-0", failing, "MI355X", MODEL)])) as router:
            full = status_of(router, chat("busy"))
            assert full.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "full" in full.details()
            call = router.stub.Generate(chat("hello"), timeout=10)
            assert next(call).text == "Hi"
            with pytest.raises(grpc.RpcError) as broken:
                list(call)
            assert broken.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        failing.stop()


def test_an_unreachable_replica_is_unavailable(instant: RecordingReplica) -> None:
    document = replicas_document([("gone-0", instant, "MI355X", MODEL)])
    with grpc_router(document.replace(instant.url, "http://127.0.0.1:9")) as router:
        error = status_of(router, chat(max_tokens=1))
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        assert MODEL in error.details()


# -- deadlines and cancellation -------------------------------------------------------------------


def test_the_clients_deadline_ends_the_call_and_the_replicas_request(
    router: GrpcRouter, realtime: ReplicaThread
) -> None:
    long = chat(model=SLOW_MODEL, max_tokens=50_000, ignore_eos=True)
    started = time.monotonic()
    error = status_of(router, long, timeout_s=0.5)
    assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 5
    assert wait_until(lambda: replica_running(realtime.url) == 0, timeout_s=10)


def test_the_routers_deadline_applies_when_it_comes_first(realtime: ReplicaThread) -> None:
    document = replicas_document([("mi300x-rt", realtime, "MI300X", SLOW_MODEL)])
    with grpc_router(document, settings=RouterSettings(request_deadline_s=0.5)) as short:
        started = time.monotonic()
        long = chat(model=SLOW_MODEL, max_tokens=50_000, ignore_eos=True)
        error = status_of(short, long, timeout_s=None)  # the client sets no deadline
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 5
    assert wait_until(lambda: replica_running(realtime.url) == 0, timeout_s=10)


def test_a_client_that_cancels_cancels_the_replicas_request(
    router: GrpcRouter, realtime: ReplicaThread
) -> None:
    call = router.stub.Generate(
        chat(model=SLOW_MODEL, max_tokens=50_000, ignore_eos=True), timeout=30
    )
    first = next(call)
    assert first.replica.id == "mi300x-rt"
    assert replica_running(realtime.url) == 1
    call.cancel()
    assert wait_until(lambda: replica_running(realtime.url) == 0, timeout_s=10)


# -- models, health, reflection -------------------------------------------------------------------


def test_list_models_lists_every_served_model(router: GrpcRouter) -> None:
    response = router.stub.ListModels(pb.ListModelsRequest(), timeout=5)
    assert [m.id for m in response.models] == sorted([MODEL, SLOW_MODEL])


def test_health_is_serving_for_the_server_and_the_router_service(router: GrpcRouter) -> None:
    assert router.health_status("") == health_pb2.HealthCheckResponse.SERVING
    assert router.health_status(SERVICE) == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_and_describes_the_router_service(router: GrpcRouter) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(router.channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
    ]
    listed, described = list(stub.ServerReflectionInfo(iter(requests), timeout=5))
    names = {s.name for s in listed.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names
    files = described.file_descriptor_response.file_descriptor_proto
    assert files and b"orchestrator/router/v1/router.proto" in files[0]


def test_health_follows_the_routers_readiness(instant: RecordingReplica) -> None:
    draining = replicas_document([("mi355x-0", instant, "MI355X", MODEL)]).replace(
        "engine: sim", f"engine: sim, state: {ReplicaState.DRAINING.value}"
    )
    quick = GrpcSettings(health_interval_s=0.05)
    with grpc_router(draining, grpc_settings=quick) as router:
        assert router.health_status() == health_pb2.HealthCheckResponse.NOT_SERVING
        ready = parse_replicas(replicas_document([("mi355x-0", instant, "MI355X", MODEL)]))

        async def replace() -> None:
            router.table.replace(RoutingTable(version=2, replicas=ready.replicas))

        router.call(replace)
        serving = health_pb2.HealthCheckResponse.SERVING
        assert wait_until(lambda: router.health_status(SERVICE) == serving, timeout_s=5)


def test_an_address_that_cannot_be_bound_is_a_clear_error(instant: RecordingReplica) -> None:
    service = RouterService(
        TableHolder(parse_replicas(replicas_document([("a", instant, "MI355X", MODEL)]))),
        profile_named("capacity"),
    )

    async def bind() -> None:
        await start_grpc_server(service, "256.0.0.1", 50051)

    with pytest.raises(OrchestratorError) as caught:
        asyncio.run(bind())
    assert caught.value.message == "cannot bind the gRPC server to 256.0.0.1:50051"


def test_stopping_lets_in_flight_streams_finish_and_refuses_new_calls(
    realtime: ReplicaThread,
) -> None:
    document = replicas_document([("mi300x-rt", realtime, "MI300X", SLOW_MODEL)])
    with grpc_router(document) as router:
        watch = router.health.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=30)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        call = router.stub.Generate(
            chat(model=SLOW_MODEL, max_tokens=1500, ignore_eos=True), timeout=30
        )
        first = next(call)
        stopping = router.submit(lambda: router.server.stop(grace_s=20))
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()

        def refused() -> bool:
            try:
                generate(router, chat(max_tokens=1, model=SLOW_MODEL), timeout_s=2)
            except grpc.RpcError as error:
                return error.code() is grpc.StatusCode.UNAVAILABLE
            return False

        assert wait_until(refused, timeout_s=5)
        assert not stopping.done()
        messages = [first, *call]
        stopping.result(timeout=25)
        assert messages[-1].finish_reason == "length"
        assert messages[-1].usage.completion_tokens == 1500


# -- fuzzing --------------------------------------------------------------------------------------

_TOOLS = json.dumps([{"type": "function", "function": {"name": "f", "parameters": {}}}])
_texts = st.text(max_size=40)
_ROLES = ["user", "system", "assistant", "developer", "tool"]
_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
# (valid values, values that may be anything): a sane request draws only from the first.
# Small limits keep it fast: an unset or large limit lets a replica write thousands of tokens.
_FIELDS = {
    "model": (st.just(MODEL), st.sampled_from(["", "gpt-4o", MODEL])),
    "role": (st.sampled_from(_ROLES), st.sampled_from(["", "bot", "USER", *_ROLES])),
    "max_tokens": (
        st.integers(min_value=1, max_value=16),
        st.one_of(
            st.integers(min_value=-(2**31), max_value=0),
            st.integers(min_value=200_000, max_value=2**31 - 1),
        ),
    ),
    "temperature": (st.floats(0.0, 2.0), _FLOATS),
    "top_p": (st.floats(0.01, 1.0), _FLOATS),
    "priority": (st.sampled_from([0, 1, 2]), st.integers(min_value=0, max_value=2**31 - 1)),
    "reasoning_effort": (
        st.sampled_from(["", "low", "medium", "high"]),
        st.sampled_from(["max", "HIGH", " low"]),
    ),
    "tools_json": (
        st.sampled_from(["", _TOOLS]),
        st.sampled_from(["{}", "[1]", "nope", "[" * 5000]),
    ),
}


@st.composite
def generate_requests(draw: st.DrawFn) -> tuple[bool, pb.GenerateRequest]:
    """(sane, request): half sane requests, half with any of their fields possibly wrong."""
    sane = draw(st.booleans())

    def field(name: str) -> Any:
        valid, anything = _FIELDS[name]
        return draw(valid if sane else st.one_of(valid, anything))

    request = pb.GenerateRequest(
        model=field("model"),
        stop=draw(st.lists(_texts, max_size=3)),
        ignore_eos=draw(st.booleans()),
        priority=field("priority"),
        client_site=draw(st.sampled_from(["", "lab", "elsewhere"])),
        max_tokens=field("max_tokens"),
    )
    kinds = ["messages", "prompt", "ids"] if sane else ["messages", "prompt", "ids", "mixed"]
    kind = draw(st.sampled_from(kinds))
    if kind in ("messages", "mixed"):
        for content in draw(st.lists(_texts, min_size=1, max_size=3)):
            request.messages.add(role=field("role"), content=content)
        request.reasoning_effort = field("reasoning_effort")
        request.tools_json = field("tools_json")
    if kind in ("prompt", "mixed"):
        request.prompt = draw(_texts.filter(bool) if sane else _texts)
    if kind in ("ids", "mixed"):
        ids = st.integers(min_value=0, max_value=2**32 - 1)
        request.prompt_token_ids.extend(draw(st.lists(ids, min_size=1, max_size=4)))
    for name in ("temperature", "top_p"):
        if draw(st.booleans()):
            setattr(request, name, field(name))
    if draw(st.booleans()):
        request.seed = draw(st.integers(min_value=-(2**63), max_value=2**63 - 1))
    return sane, request


EXPECTED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}


@pytest.mark.timeout(300)
def test_fuzzed_requests_get_clean_answers_and_the_server_stays_healthy(
    router: GrpcRouter,
) -> None:
    seen: dict[grpc.StatusCode, int] = {}

    @settings(
        max_examples=2000,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(generate_requests())
    def answer_is_clean(case: tuple[bool, pb.GenerateRequest]) -> None:
        sane, request = case
        try:
            messages = generate(router, request, timeout_s=20)
        except grpc.RpcError as error:
            code = error.code()
            assert not sane, (code, error.details(), request)
            assert code in EXPECTED, (code, error.details(), request)
            assert error.details()
        else:
            code = grpc.StatusCode.OK
            assert messages[-1].finish_reason, request
            assert messages[-1].HasField("usage")
        seen[code] = seen.get(code, 0) + 1

    answer_is_clean()
    assert sum(seen.values()) >= 2000
    assert seen.get(grpc.StatusCode.OK, 0) > 500, seen
    assert seen.get(grpc.StatusCode.INVALID_ARGUMENT, 0) > 500, seen
    assert router.health_status() == health_pb2.HealthCheckResponse.SERVING
    assert generate(router, chat(max_tokens=2))[-1].finish_reason


# -- the Responses API ----------------------------------------------------------------------------


def create_response(router: GrpcRouter, **body: Any) -> list[pb.ResponseEvent]:
    request = pb.CreateResponseRequest(request_json=json.dumps({"model": MODEL, **body}))
    return list(router.stub.CreateResponse(request, timeout=30))


def test_create_response_streams_typed_events_ending_with_usage(router: GrpcRouter) -> None:
    events = create_response(router, input="Say hello.", reasoning={"effort": "medium"})

    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds
    assert events[0].replica.id == "mi355x-0" and not events[1].HasField("replica")
    deltas = [json.loads(e.event_json) for e in events if e.type == "response.output_text.delta"]
    final = json.loads(events[-1].event_json)["response"]
    assert "".join(d["delta"] for d in deltas) == final["output"][-1]["content"][0]["text"]
    assert events[-1].usage.completion_tokens == final["usage"]["output_tokens"] > 0


def test_a_stored_response_is_continued_retrieved_and_refused_cancel_over_grpc(
    router: GrpcRouter,
) -> None:
    first = create_response(router, input="Remember this.", max_output_tokens=6)
    response_id = json.loads(first[0].event_json)["response"]["id"]
    follow = create_response(router, input="And then?", previous_response_id=response_id)
    assert json.loads(follow[-1].event_json)["response"]["previous_response_id"] == response_id

    stored = router.stub.GetResponse(pb.GetResponseRequest(id=response_id), timeout=10)
    assert json.loads(stored.response_json)["id"] == response_id
    assert stored.replica.id == "mi355x-0"
    with pytest.raises(grpc.RpcError) as refused:
        router.stub.GetResponse(pb.GetResponseRequest(id=response_id, cancel=True), timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("request_json", "code"),
    [
        ("{not json", grpc.StatusCode.INVALID_ARGUMENT),
        ('{"model": "openai/gpt-oss-120b"}', grpc.StatusCode.INVALID_ARGUMENT),
        ('{"model": "nope", "input": "x"}', grpc.StatusCode.NOT_FOUND),
        (
            '{"model": "openai/gpt-oss-120b", "input": "x", "previous_response_id": "resp_gone"}',
            grpc.StatusCode.NOT_FOUND,
        ),
        ('{"model": "openai/gpt-oss-120b", "input": NaN}', grpc.StatusCode.INVALID_ARGUMENT),
        (
            '{"model": "openai/gpt-oss-120b", "input": "x", "top_p": -Infinity}',
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ],
)
def test_bad_create_response_requests_get_status_codes(
    router: GrpcRouter, request_json: str, code: grpc.StatusCode
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        list(router.stub.CreateResponse(pb.CreateResponseRequest(request_json=request_json)))
    assert caught.value.code() == code


def test_a_lone_surrogate_escape_is_relayed_as_written_not_an_internal_error(
    router: GrpcRouter,
) -> None:
    body = {"model": MODEL, "input": "odd \ud800 text", "max_output_tokens": 4}
    request = pb.CreateResponseRequest(request_json=json.dumps(body))
    try:
        events = list(router.stub.CreateResponse(request, timeout=20))
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    else:
        assert events[-1].type in ("response.completed", "response.incomplete")


def test_an_unexpected_failure_retrieving_a_response_is_internal_and_logged_without_the_id(
    router: GrpcRouter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    # A fault, injected where the (compiled) service looks a stored response up: an instance's
    # methods of a compiled class cannot be replaced, its interpreted collaborators' can.
    monkeypatch.setattr(router.service.stored_responses, "holder", broken)
    with pytest.raises(grpc.RpcError) as caught:
        router.stub.GetResponse(pb.GetResponseRequest(id="resp_secretish"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "internal error"
    assert "GetResponse" in caplog.text and "resp_secretish" not in caplog.text
    assert router.health_status() == health_pb2.HealthCheckResponse.SERVING


def test_an_unknown_stored_response_is_not_found(router: GrpcRouter) -> None:
    for response_id in ("resp_unknown", "bad id"):
        with pytest.raises(grpc.RpcError) as caught:
            router.stub.GetResponse(pb.GetResponseRequest(id=response_id), timeout=10)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


response_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from([MODEL, "nope", 3]),
        "input": st.text(max_size=60)
        | st.lists(
            st.fixed_dictionaries({"role": st.just("user"), "content": st.text(max_size=20)}),
            max_size=2,
        )
        | st.integers()
        | st.just("\ud800")  # a lone surrogate: valid JSON as an escape
        | st.just(float("nan")),  # written as NaN, which JSON lacks
        "max_output_tokens": st.integers(min_value=-2, max_value=8) | st.just("8"),
        "reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["low", "high", "x"])}),
        "previous_response_id": st.sampled_from(["resp_gone", "a b", 7]),
        "stream": st.booleans(),
    },
)


sane_response_bodies = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "input": st.text(max_size=60),
        "max_output_tokens": st.integers(min_value=1, max_value=32),
    },
    optional={"reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["low", "high"])})},
)


def test_any_create_response_request_gets_events_or_a_clean_status(router: GrpcRouter) -> None:
    seen: dict[grpc.StatusCode, int] = {}

    @settings(max_examples=150, deadline=None, database=None, derandomize=True)
    @given(
        st.one_of(
            sane_response_bodies.map(json.dumps),
            response_bodies.map(json.dumps),
            st.text(max_size=20),
        )
    )
    def answer_is_clean(request_json: str) -> None:
        request = pb.CreateResponseRequest(request_json=request_json)
        try:
            events = list(router.stub.CreateResponse(request, timeout=20))
        except grpc.RpcError as error:
            code = error.code()
            assert code in EXPECTED, (code, error.details(), request_json)
            assert error.details()
        else:
            code = grpc.StatusCode.OK
            assert events[-1].type in ("response.completed", "response.incomplete")
            assert events[-1].HasField("usage")
        seen[code] = seen.get(code, 0) + 1

    answer_is_clean()
    assert seen.get(grpc.StatusCode.OK, 0) > 20 and seen.get(grpc.StatusCode.INVALID_ARGUMENT, 0)
    assert router.health_status() == health_pb2.HealthCheckResponse.SERVING
