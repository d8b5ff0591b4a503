"""The embedded stack the chaos suite breaks, assembled from the real parts `orchestrator up` runs.

- A real multi-node Ray cluster (`ray.cluster_utils.Cluster`): a head and a `kr` MI300X node whose
  two simulated replicas run as `ReplicaActor`s, placed by the control plane's reconciler.
- Four `orchestrator sim serve` processes in two external pools: `us-ext` on loopback (the ones a
  test SIGKILLs and SIGSTOPs) and `eu-ext` inside a network namespace of its own, behind a veth
  pair (the site a test partitions).
- The control plane (registry, reconciler, external checks, gRPC) serving mutual TLS, and a router
  (its real HTTP front end and fast lane) following it with a client certificate, both on one
  event loop in a thread of their own.

`Load` drives steady streaming chat completions through the router with the official `openai`
client and sorts every request into completed, failed with a clean error (an OpenAI error body or
SSE error event), failed uncleanly (a dropped connection, a stream cut without an error) or hung
(no end within the router's deadline plus a grace). A long load (`long_output=True`: seeded
answers of `LONG_TOKENS`) keeps what each stream read, for `replay_mismatches` to compare with
the same request answered whole by a healthy replica: the check that a stream moved mid-way lost
or repeated nothing. The router's view (which replicas it would
route to) is sampled every `SAMPLE_S` on its own loop, so detection and recovery are read from
what the router did, not from what the test did.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import openai
import ray
from netns import SiteNamespace
from ray.cluster_utils import Cluster
from ray_cluster import start_cluster
from security.pki import Pki, make_pki

from orchestrator.config.loader import parse_config
from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.controlplane.placement import node_groups
from orchestrator.controlplane.registry_state import DEFAULT_HEARTBEAT_TIMEOUT_S
from orchestrator.controlplane.replica_actor import DEFAULT_HEARTBEAT_S
from orchestrator.controlplane.watch_client import follow_routing_table
from orchestrator.core.records import ReplicaState
from orchestrator.frontends.http.server import RouterHttpServer
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.table.source import TableHolder

T = TypeVar("T")

NAMESPACE = "orchestrator-chaos"
MODEL = "openai/gpt-oss-120b"
# Simulated engines four times slower than the hardware: six replicas, a router and the clients
# fit on two cores, and a 12-token answer takes about a second.
TIME_SCALE = 4.0
# The router's request deadline (wall seconds): what bounds a request stuck on a replica that
# hangs (SIGSTOP) or sits behind a partition, and so the SIGSTOP row's detection bound.
DEADLINE_S = 10.0
# A request with no end this long after it began has hung.
HUNG_AFTER_S = DEADLINE_S + 5.0
CLIENTS = 6
MAX_TOKENS = 12
LONG_TOKENS = 160  # a long answer streams for about 2 s at this time scale
# Per-attempt bounds (real seconds; times TIME_SCALE on the wall): a stalled stream moves after
# 2 s, a silent replica is left after 4 s.
STALL_TIMEOUT_S = 0.5
FIRST_BYTE_TIMEOUT_S = 1.0
SAMPLE_S = 0.05
DETECT_BOUND_S = 5.0
# A partitioned site is noticed by its replicas' missed heartbeats: the registry's timeout after
# the last beat that got through (up to a beat before the cut), then the sweep that finds it and
# the table pushed to the router, which take a second or two on a loaded 2-core machine.
PARTITION_DETECT_BOUND_S = DEFAULT_HEARTBEAT_TIMEOUT_S + DEFAULT_HEARTBEAT_S + 2.0
# Ray's own node failure detection, quickened as `orchestrator up` cannot (1.5 s, not 30 s).
FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
}
EU_SUBNET = 7
SIM_PORT_IN_NAMESPACE = 8101  # the namespace is ours alone: nothing else can hold its ports


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SimProcess:
    """`orchestrator sim serve` as a child process (in a namespace when `namespace` is given)."""

    def __init__(
        self, replica_id: str, host: str, port: int, namespace: SiteNamespace | None = None
    ) -> None:
        self.replica_id = replica_id
        self.host = host
        self.port = port
        self.namespace = namespace
        self.url = f"http://{host}:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SimProcess:
        argv = [
            sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "sim", "serve",
            "--generation", "MI355X", "--host", self.host, "--port", str(self.port),
            "--time-scale", str(TIME_SCALE), "--seed", str(self.port),
        ]  # fmt: skip
        if self.namespace is not None:
            argv = self.namespace.command(argv)
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process is not None and self.process.poll() is None, (
                f"{self.replica_id} exited while starting"
            )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/health", timeout=1) as answer,
            ):
                if answer.status == 200:
                    return
            assert time.monotonic() < deadline, f"{self.replica_id} not ready in {timeout_s} s"
            time.sleep(0.1)

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, and reap it (a stopped process is continued first so it can die)."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(10)


class LoopThread:
    """An event loop in a thread of its own, for the control plane and the router."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@dataclass(frozen=True, slots=True)
class Sample:
    """The router's view at one instant: the replicas it would route to (ready in its table and
    circuit closed), those its own circuit breakers keep it from, and its table's version."""

    at_s: float
    routable: frozenset[str]
    circuit_open: frozenset[str]
    version: int


def config_text(us_ports: list[int], eu_address: str) -> str:
    us = ", ".join(f'"http://127.0.0.1:{p}"' for p in us_ports)
    eu = f'"http://{eu_address}:{SIM_PORT_IN_NAMESPACE}", '
    eu += f'"http://{eu_address}:{SIM_PORT_IN_NAMESPACE + 1}"'
    return f"""
apiVersion: orchestrator/v1alpha1
kind: Orchestrator
model: {MODEL}
sites:
  kr: {{rttMs: {{us: 150, eu: 250}}}}
  us: {{rttMs: {{eu: 100}}}}
  eu: {{}}
pools:
  - {{name: kr-mi300x, site: kr, generation: MI300X, engine: sim, replicas: 2,
      timeScale: {TIME_SCALE}}}
  - {{name: us-ext, site: us, generation: MI355X, engine: external, endpoints: [{us}]}}
  - {{name: eu-ext, site: eu, generation: MI355X, engine: external, endpoints: [{eu}]}}
"""


@dataclass
class ChaosStack:
    config: OrchestratorConfig
    cluster: Cluster
    kr_node: Any
    servers: LoopThread
    control_plane: ControlPlane
    router: RouterService
    router_url: str
    us_sims: list[SimProcess]
    eu_sims: list[SimProcess]
    eu_site: SiteNamespace
    samples: list[Sample] = field(default_factory=list)

    @property
    def fleet_size(self) -> int:
        return 2 + len(self.us_sims) + len(self.eu_sims)

    def latest(self) -> Sample:
        return self.samples[-1]

    def pool_routable(self, pool: str) -> set[str]:
        ids = {r.replica_id for r in self.router.table.snapshot().replicas if r.pool == pool}
        return ids & self.latest().routable

    def first_sample(self, since_s: float, holds: Callable[[Sample], bool]) -> Sample | None:
        """The first sample at or after `since_s` where `holds`."""
        for sample in list(self.samples):
            if sample.at_s >= since_s and holds(sample):
                return sample
        return None

    def detected_by(self, since_s: float, delay_s: float, failed: set[str]) -> str:
        """What took `failed` out of routing at `since_s + delay_s`: the router's own circuit
        breakers, or the control plane marking them unhealthy or gone in the table."""
        sample = self.first_sample(since_s + delay_s, lambda s: True)
        assert sample is not None
        return "router breaker" if failed & sample.circuit_open else "control plane"

    async def until(
        self, since_s: float, holds: Callable[[Sample], bool], timeout_s: float
    ) -> float:
        """Wait for the first sample after `since_s` where `holds`; its delay from `since_s`."""
        while True:
            found = self.first_sample(since_s, holds)
            if found is not None:
                return found.at_s - since_s
            if time.monotonic() - since_s > timeout_s:
                raise AssertionError(f"the router's view did not change within {timeout_s:g} s")
            await asyncio.sleep(SAMPLE_S)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the router's registry (0 when it has none yet)."""
        return self.router.registry.get_sample_value(name, labels) or 0.0

    def streams_on(self, replica_id: str) -> int:
        """Streams the router relays from `replica_id` now that could move elsewhere."""
        return len(self.router.dispatcher.streams.get(replica_id, ()))

    async def fleet_whole(self, timeout_s: float = 90.0) -> None:
        await self.until(time.monotonic(), lambda s: len(s.routable) == self.fleet_size, timeout_s)


def _sample(router: RouterService) -> Sample:
    routable, circuit_open = [], []
    table = router.table.snapshot()
    for replica in table.replicas:
        stats = router.fleet.stats(replica.replica_id)
        if stats is not None and stats.circuit_open:
            circuit_open.append(replica.replica_id)
        elif replica.state is ReplicaState.READY and stats is not None:
            routable.append(replica.replica_id)
    return Sample(time.monotonic(), frozenset(routable), frozenset(circuit_open), table.version)


@contextlib.contextmanager
def chaos_stack(workdir: Path) -> Iterator[ChaosStack]:
    """Start everything (each part stopped again however the block ends)."""
    with contextlib.ExitStack() as stack:
        eu_site = SiteNamespace("eu", EU_SUBNET).create()
        stack.callback(eu_site.delete)
        us_sims = [SimProcess(f"us-ext-{n}", "127.0.0.1", free_port()) for n in range(2)]
        eu_sims = [
            SimProcess(f"eu-ext-{n}", eu_site.site_address, SIM_PORT_IN_NAMESPACE + n, eu_site)
            for n in range(2)
        ]
        for sim in (*us_sims, *eu_sims):
            stack.callback(sim.kill)
            sim.start()
        config = parse_config(
            config_text([s.port for s in us_sims], eu_site.site_address), source="chaos"
        )
        (kr_group,) = node_groups(config)
        cluster, nodes = start_cluster(
            {"num_cpus": 1, "include_dashboard": False, "_system_config": FAST_FAILURE_DETECTION},
            lambda cluster: {"kr": cluster.add_node(num_cpus=1, **kr_group.ray_node_args())},
        )
        stack.callback(cluster.shutdown)
        stack.callback(ray.shutdown)
        cluster.connect(namespace=NAMESPACE)
        for sim in (*us_sims, *eu_sims):
            sim.wait_ready()

        pki: Pki = make_pki(workdir / "pki")
        servers = LoopThread()
        stack.callback(servers.close)
        control_plane = ControlPlane(
            config,
            namespace=NAMESPACE,
            port=0,
            reconcile_interval_s=0.5,
            tls=pki.server_files(mutual=True),
        )
        router = RouterService(
            TableHolder(),
            profile_named("capacity"),
            settings=RouterSettings(
                latency_scale=TIME_SCALE,
                request_deadline_s=DEADLINE_S / TIME_SCALE,
                stall_timeout_s=STALL_TIMEOUT_S,
                first_byte_timeout_s=FIRST_BYTE_TIMEOUT_S,
            ),
            scrape_replicas=False,
        )
        http_server = RouterHttpServer(router)
        samples: list[Sample] = []
        tasks: list[asyncio.Task[None]] = []

        async def sample() -> None:
            while True:
                samples.append(_sample(router))
                await asyncio.sleep(SAMPLE_S)

        async def up() -> int:
            port = await control_plane.start()
            http_port = await http_server.start()
            tasks.append(
                asyncio.create_task(
                    follow_routing_table(
                        f"127.0.0.1:{port}",
                        router.table,
                        retry_s=0.2,
                        tls=pki.client_files(),
                        loads=router,
                        clock=router.clock.now,
                    )
                )
            )
            tasks.append(asyncio.create_task(sample()))
            return http_port

        async def down() -> None:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await http_server.stop()
            await control_plane.stop(remove_registry=True)

        http_port = servers.run(up())
        stack.callback(lambda: servers.run(down()))
        yield ChaosStack(
            config=config,
            cluster=cluster,
            kr_node=nodes["kr"],
            servers=servers,
            control_plane=control_plane,
            router=router,
            router_url=f"http://127.0.0.1:{http_port}",
            us_sims=us_sims,
            eu_sims=eu_sims,
            eu_site=eu_site,
            samples=samples,
        )


# -- load -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request: "completed", "clean" (failed with an OpenAI error), "unclean" (failed
    without one) or "hung"; `detail` says what failed."""

    kind: str
    started_s: float
    ended_s: float
    detail: str = ""


@dataclass
class StreamRead:
    """What one long stream's client read: to compare with a replay of `seed`'s request."""

    seed: int
    started_s: float = 0.0
    ended_s: float = 0.0
    text: str = ""
    ids: set[str] = field(default_factory=set)
    roles: int = 0
    finishes: list[str] = field(default_factory=list)
    usages: list[tuple[int, int]] = field(default_factory=list)  # (prompt, completion)


@dataclass
class Load:
    """`CLIENTS` clients sending streaming chat completions back to back until stopped."""

    router_url: str
    long_output: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    reads: list[StreamRead] = field(default_factory=list)  # completed long streams
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    seeds: Iterator[int] = field(default_factory=itertools.count)

    async def run(self) -> None:
        client = openai.AsyncOpenAI(
            base_url=f"{self.router_url}/v1",
            api_key="unused",
            max_retries=0,
            timeout=HUNG_AFTER_S + 30,  # never first: hanging is what this load measures
        )
        async with client:
            await asyncio.gather(*(self._client(client, n) for n in range(CLIENTS)))

    async def _client(self, client: openai.AsyncOpenAI, number: int) -> None:
        for turn in itertools.count():
            if self.stop.is_set():
                return
            started = time.monotonic()
            read = StreamRead(next(self.seeds)) if self.long_output else None
            try:
                kind, detail = await asyncio.wait_for(
                    _request(client, f"client {number} turn {turn}", read), HUNG_AFTER_S
                )
            except TimeoutError:
                kind, detail = "hung", f"no end within {HUNG_AFTER_S:g} s"
            ended = time.monotonic()
            self.outcomes.append(Outcome(kind, started, ended, detail))
            if read is not None and kind == "completed":
                read.started_s, read.ended_s = started, ended
                self.reads.append(read)


def long_request(seed: int) -> dict[str, Any]:
    """The body of long stream `seed` (`ignore_eos`: the same length on every generation)."""
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Tell the fleet story number {seed}."}],
        "max_tokens": LONG_TOKENS,
        "seed": seed,
        "extra_body": {"ignore_eos": True},
    }


async def _request(
    client: openai.AsyncOpenAI, prompt: str, read: StreamRead | None = None
) -> tuple[str, str]:
    try:
        if read is None:
            chunks = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=MAX_TOKENS,
                stream=True,
            )
        else:
            chunks = await client.chat.completions.create(
                stream=True, stream_options={"include_usage": True}, **long_request(read.seed)
            )
        finish = None
        async for chunk in chunks:
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
            if read is not None:
                _note(read, chunk)
    except openai.APIConnectionError as error:  # the connection broke: no error was given
        return "unclean", f"{type(error).__name__}: {error}"
    except openai.APIError as error:  # an OpenAI error body or SSE error event
        return "clean", f"{type(error).__name__}: {error.message}"
    if finish is None:
        return "unclean", "the stream ended without a finish reason or an error"
    return "completed", ""


def _note(read: StreamRead, chunk: Any) -> None:
    read.ids.add(chunk.id)
    if chunk.usage is not None:
        read.usages.append((chunk.usage.prompt_tokens, chunk.usage.completion_tokens))
    for choice in chunk.choices:
        read.roles += choice.delta.role is not None
        read.text += choice.delta.content or ""
        if choice.finish_reason is not None:
            read.finishes.append(choice.finish_reason)


async def replay_mismatches(reads: list[StreamRead], replica_url: str) -> list[str]:
    """Each read against its request answered whole by the replica at `replica_url`: what
    differs (text, usage, finish, or a stream that was not one: two ids, two role deltas)."""
    client = openai.AsyncOpenAI(base_url=f"{replica_url}/v1", api_key="unused", max_retries=0)

    async def check(read: StreamRead) -> str:
        whole = await client.chat.completions.create(**long_request(read.seed))
        assert whole.usage is not None
        usage = (whole.usage.prompt_tokens, whole.usage.completion_tokens)
        problems = [
            name
            for name, ok in (
                ("text", read.text == whole.choices[0].message.content),
                ("usage", read.usages == [usage]),
                ("finish", read.finishes == [whole.choices[0].finish_reason]),
                ("one stream", len(read.ids) == 1 and read.roles == 1),
            )
            if not ok
        ]
        return f"seed {read.seed}: {', '.join(problems)}" if problems else ""

    async with client:
        found = await asyncio.gather(*(check(read) for read in reads))
    return [problem for problem in found if problem]


@contextlib.asynccontextmanager
async def steady_load(
    stack: ChaosStack, warm_s: float = 1.5, *, long_output: bool = False
) -> AsyncIterator[Load]:
    """Load running for `warm_s` before the block and until every request ended after it."""
    load = Load(stack.router_url, long_output=long_output)
    clients = asyncio.create_task(load.run())
    await asyncio.sleep(warm_s)
    try:
        yield load
        await asyncio.sleep(1.0)  # load on the healed fleet
    finally:
        load.stop.set()
        await asyncio.wait_for(clients, HUNG_AFTER_S + 10)


# -- the table --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChaosRow:
    """One fault under load. `detect_s`: fault to the router no longer routing to what failed;
    `recover_s`: end of the fault (restart, SIGCONT, link up; for faults the system heals
    itself, the fault) to the router routing to the whole fleet again."""

    fault: str
    requests: int
    completed: int
    failed_clean: int
    failed_unclean: int
    hung: int
    detect_s: float
    detect_bound_s: float
    detected_by: str
    recover_s: float
    examples: tuple[str, ...] = ()
    moved: MidStream | None = None

    @classmethod
    def of(
        cls,
        fault: str,
        load: Load,
        detect_s: float,
        bound_s: float,
        detected_by: str,
        recover_s: float,
        moved: MidStream | None = None,
    ) -> ChaosRow:
        kinds = ("completed", "clean", "unclean", "hung")
        count = {k: sum(o.kind == k for o in load.outcomes) for k in kinds}
        details = {o.detail for o in load.outcomes if o.detail}
        if moved is not None:
            details |= set(moved.mismatches)
        examples = tuple(sorted(details))[:4]
        return cls(
            fault, len(load.outcomes), count["completed"], count["clean"], count["unclean"],
            count["hung"], round(detect_s, 2), bound_s, detected_by, round(recover_s, 2), examples,
            moved,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class MidStream:
    """Streams the fault caught mid-way: `migrated` continued elsewhere, `replayed` streams
    compared with a replay (`mismatches`: those that differ). `moved_s`: the fault to the last
    stream moved off the replica; `continue_s`: the router's mean time from a stream's failure
    to its continuation's first bytes."""

    migrated: int
    replayed: int
    mismatches: tuple[str, ...]
    moved_s: float
    continue_s: float


def format_table(rows: list[ChaosRow]) -> str:
    head = (
        f"{'fault':<28} {'requests':>8} {'completed':>9} {'clean err':>9} {'unclean':>7} "
        f"{'hung':>4} {'detect s':>8} {'bound s':>7} {'detected by':<14} {'recover s':>9}"
    )
    head += f" {'migrated':>8} {'replay ok':>9} {'moved s':>7} {'continue s':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        moved = r.moved
        tail = f" {'-':>8} {'-':>9} {'-':>7} {'-':>10}"
        if moved is not None:
            ok = f"{moved.replayed - len(moved.mismatches)}/{moved.replayed}"
            tail = f" {moved.migrated:>8} {ok:>9} {moved.moved_s:>7.2f} {moved.continue_s:>10.3f}"
        lines.append(
            f"{r.fault:<28} {r.requests:>8} {r.completed:>9} {r.failed_clean:>9} "
            f"{r.failed_unclean:>7} {r.hung:>4} {r.detect_s:>8.2f} {r.detect_bound_s:>7.1f} "
            f"{r.detected_by:<14} {r.recover_s:>9.2f}" + tail
        )
    for r in rows:
        lines.extend(f"  {r.fault}: {example}" for example in r.examples)
    return "\n".join(lines)


def write_json(rows: list[ChaosRow], path: Path) -> None:
    document = {
        "time_scale": TIME_SCALE,
        "deadline_s": DEADLINE_S,
        "clients": CLIENTS,
        "cpus": os.cpu_count(),
        "rows": [asdict(r) for r in rows],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
