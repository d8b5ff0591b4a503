"""The orchestrator's config: one versioned YAML document, parsed into frozen, validated models.

    apiVersion: orchestrator/v1alpha1
    kind: Orchestrator
    model: openai/gpt-oss-120b            # optional; this is the default
    sites:                                # name → measured round trip to the other sites, in ms
      kr: {rttMs: {us: 150}}
      us: {}                              # us → kr is read from kr → us
    pools:
      - {name: kr-mi300x, site: kr, generation: MI300X, engine: sim, replicas: 2, timeScale: 10}
      - {name: us-mi355x, site: us, generation: AMD-Instinct-MI355X-OAM, engine: vllm,
         replicas: 2, gpusPerReplica: 1, engineArgs: ["--max-num-seqs", "256"]}
      - {name: us-legacy, site: us, generation: MI300X, engine: external,
         endpoints: ["http://10.1.0.9:8000"]}
    router: {profile: capacity, httpPort: 8000, grpcPort: 50051, metricsPort: 9190,
             latencyScale: 10,
             slo: {ttftS: 3.0, tpotS: 0.08, classes: {batch: {ttftS: 30}}}}  # config/slo.py
                                          # admission, attempts, breaker, upstream, http,
                                          # grpc, timing: their keys in docs/settings.md
    controlPlane: {grpcPort: 50052}       # tls: {certFile, keyFile, clientCaFile} (mutual TLS);
                                          # httpSdPort: engines' Prometheus HTTP SD;
                                          # replicaTls: {caFile, certFile, keyFile} (checks)
    exporters: {port: 9400}               # node k's exporter on port + k; 0: any free ports
    fabricHealth: {holdDownS: 5}          # thresholds of node health (config/fabric_health.py)

What is checked, beyond types (every check names the field, and lists the allowed values):
- unknown keys anywhere; names of sites and pools are DNS labels (they become Ray and K8s labels);
- a generation in any spelling `parse_generation` accepts, normalised; anything else is quoted back;
- RTTs are finite and >= 0 ms, name known sites other than their own, and say the same both ways
  when given both ways; every pair of sites has an RTT in at least one direction;
- pools have unique names and name a known site; `replicas` (>= 0) is required for the engines the
  control plane starts (sim, vllm, sglang) and refused for `external`, which is sized by its
  `endpoints` (or by Kubernetes discovery through `selector`, with the pods' serving `port`,
  default 8000); `timeScale` is for `sim` only;
  `engineArgs` is not for `external`; no endpoint appears twice;
- ports are in 1..65535 and no two services share one.
Field types and their checks are in `config/fields.py`, the cross-field checks in
`config/cross_checks.py` (run on the parts that validate of a malformed document by `partial.py`).

Defaults are documented, never substituted for a bad value: a `sim` pool without `timeScale` runs
in real time (1.0); `router.latencyScale` defaults to the largest `timeScale` of the sim pools (the
router's latency targets stretch as the simulated engines slow down), else 1.0; `router.slo`
defaults to MLPerf's Server limits (3 s TTFT, 80 ms TPOT) for every class.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.config.admission import AdmissionSpec
from orchestrator.config.attempts import AttemptsSpec
from orchestrator.config.breaker import BreakerSpec
from orchestrator.config.cross_checks import ConfigProblems, cross_field_problems, service_ports
from orchestrator.config.errors import ConfigProblem
from orchestrator.config.fabric_health import FabricHealthSpec
from orchestrator.config.fields import (
    DEFAULT_CONTROL_PLANE_GRPC_PORT,
    DEFAULT_EXPORTER_PORT,
    DEFAULT_ROUTER_GRPC_PORT,
    DEFAULT_ROUTER_HTTP_PORT,
    DEFAULT_ROUTER_METRICS_PORT,
    EndpointUrl,
    Name,
    Port,
    PortOrAny,
    RttMs,
    Scale,
)
from orchestrator.config.grpc import GrpcSpec
from orchestrator.config.http import HttpSpec
from orchestrator.config.router_timing import RouterTimingSpec
from orchestrator.config.slo import SloSpec
from orchestrator.config.upstream import UpstreamSpec
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation, parse_generation
from orchestrator.core.records import EngineKind, Site

API_VERSION: Final = "orchestrator/v1alpha1"
KIND: Final = "Orchestrator"
DEFAULT_MODEL: Final = "openai/gpt-oss-120b"
# The routing layer owns the profiles (`routing/data/profiles.yaml`); config sits below it, so it
# keeps their names here, and a test keeps the two in step.
BUILTIN_PROFILE_NAMES: Final = (
    "capacity",
    "round-robin",
    "least-requests",
    "power-of-two",
    "weighted-static",
)
DEFAULT_PROFILE: Final = "capacity"
DISCOVERED_PORT: Final = 8000  # vLLM's default; a pool with a selector may set `port`
DEFAULT_SIM_TIME_SCALE: Final = 1.0
_LAUNCHED: Final = frozenset({EngineKind.SIM, EngineKind.VLLM, EngineKind.SGLANG})


def bare_sites(value: object) -> object:
    """`us:` with nothing under it is a site with no RTTs listed, same as `us: {}`."""
    if isinstance(value, Mapping):
        return {name: {} if spec is None else spec for name, spec in value.items()}
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SiteSpec(_Strict):
    """A failure and latency domain. `rtt_ms` maps other sites to the measured round trip (ms)."""

    rtt_ms: dict[str, RttMs] = Field(default_factory=dict, alias="rttMs")


class PoolSpec(_Strict):
    """Replicas of one generation, in one site, on one engine.

    `replicas` is the desired size for the engines the control plane starts, and `None` for
    `external` pools, whose size is their `endpoints` (or what `selector` discovers).
    `time_scale` is `None` for every engine but `sim`, where it defaults to 1.0 (real time).
    """

    name: Name
    site: Annotated[str, Field(min_length=1)]
    generation: Generation
    engine: EngineKind
    replicas: Annotated[int, Field(strict=True, ge=0)] | None = None
    gpus_per_replica: Annotated[int, Field(strict=True, ge=1)] = Field(
        default=1, alias="gpusPerReplica"
    )
    time_scale: Scale | None = Field(default=None, alias="timeScale")
    engine_args: tuple[str, ...] = Field(default=(), alias="engineArgs")
    endpoints: tuple[EndpointUrl, ...] = ()
    selector: Annotated[dict[str, str], Field(min_length=1)] | None = None
    port: Port | None = None  # serving port of the pods `selector` finds; None: DISCOVERED_PORT

    @field_validator("generation", mode="before")
    @classmethod
    def _any_spelling(cls, value: object) -> object:
        return parse_generation(value) if isinstance(value, str) else value

    @field_validator("engine", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fits_its_engine(self) -> PoolSpec:
        engine = self.engine.value
        problems: list[ConfigProblem] = []
        if self.time_scale is not None and self.engine is not EngineKind.SIM:
            problems.append(
                ConfigProblem(
                    "timeScale",
                    f"only simulated pools (engine: sim) have a time scale; remove it for"
                    f" engine {engine!r}",
                )
            )
        if self.engine is EngineKind.EXTERNAL:
            if self.replicas is not None:
                problems.append(
                    ConfigProblem(
                        "replicas",
                        "an external pool is sized by its endpoints (or by discovery through"
                        " selector); remove replicas",
                    )
                )
            if self.engine_args:
                problems.append(
                    ConfigProblem(
                        "engineArgs",
                        "external replicas are not started by the orchestrator; remove engineArgs",
                    )
                )
            if self.port is not None and self.selector is None:
                problems.append(
                    ConfigProblem(
                        "port",
                        "port is the serving port of pods found through selector; endpoint URLs"
                        " carry their own port",
                    )
                )
            if not self.endpoints and self.selector is None:
                problems.append(
                    ConfigProblem(
                        "endpoints",
                        "an external pool needs at least one endpoint URL, or a selector (label"
                        " map) for Kubernetes discovery",
                    )
                )
        else:
            if self.replicas is None:
                problems.append(
                    ConfigProblem(
                        "replicas",
                        f"required for engine {engine!r}: how many replicas to keep running (>= 0)",
                    )
                )
            for field, present in (
                ("endpoints", bool(self.endpoints)),
                ("selector", self.selector),
                ("port", self.port is not None),
            ):
                if present:
                    problems.append(
                        ConfigProblem(
                            field,
                            f"only external pools have {field}; the control plane starts the"
                            f" replicas of engine {engine!r} itself",
                        )
                    )
        if problems:
            raise ConfigProblems(problems)
        if self.engine is EngineKind.SIM and self.time_scale is None:
            return self.model_copy(update={"time_scale": DEFAULT_SIM_TIME_SCALE})
        return self


class RouterSpec(_Strict):
    """The router: its profile (one of `BUILTIN_PROFILE_NAMES`), ports (`/metrics` on a port of
    its own, on loopback in the embedded stack) and latency scale.

    `latency_scale` says the simulated engines run that much slower, so the router stretches its
    latency targets by it; after the whole config is validated it is never `None` (see the module
    docstring for its default). `slo` holds the targets (one model: no `models` entries).
    """

    profile: str = DEFAULT_PROFILE
    http_port: Port = Field(default=DEFAULT_ROUTER_HTTP_PORT, alias="httpPort")
    grpc_port: Port = Field(default=DEFAULT_ROUTER_GRPC_PORT, alias="grpcPort")
    metrics_port: Port = Field(default=DEFAULT_ROUTER_METRICS_PORT, alias="metricsPort")
    latency_scale: Scale | None = Field(default=None, alias="latencyScale")
    admission: AdmissionSpec = AdmissionSpec()  # overload control (config/admission.py)
    attempts: AttemptsSpec = AttemptsSpec()  # attempt timeouts, migrations (config/attempts.py)
    breaker: BreakerSpec = BreakerSpec()  # failing replicas' circuits (config/breaker.py)
    upstream: UpstreamSpec = UpstreamSpec()  # connection pool to replicas (config/upstream.py)
    http: HttpSpec = HttpSpec()  # the HTTP front end's limits (config/http.py)
    grpc: GrpcSpec = GrpcSpec()  # the gRPC front end's bounds (config/grpc.py)
    timing: RouterTimingSpec = RouterTimingSpec()  # deadline, load freshness (router_timing.py)
    slo: SloSpec = SloSpec()  # latency targets per class (config/slo.py)

    @field_validator("slo")
    @classmethod
    def _one_model(cls, value: SloSpec) -> SloSpec:
        if value.models:
            raise ValueError(
                "`models` entries belong in a replicas file; the config serves one model, whose"
                " targets are `ttftS`, `tpotS` and `classes` here"
            )
        return value

    @field_validator("profile")
    @classmethod
    def _builtin(cls, value: str) -> str:
        if value not in BUILTIN_PROFILE_NAMES:
            raise ValueError(
                f"unknown routing profile {value!r}; built-in profiles:"
                f" {', '.join(BUILTIN_PROFILE_NAMES)}"
            )
        return value


PemFile = Annotated[str, Field(min_length=1)]


class ServerTlsSpec(_Strict):
    """TLS files a server presents (PEM paths); with `client_ca_file`, callers must present a
    certificate that CA signed. The files are re-read when they change (rotation)."""

    cert_file: PemFile = Field(alias="certFile")
    key_file: PemFile = Field(alias="keyFile")
    client_ca_file: PemFile | None = Field(default=None, alias="clientCaFile")


class ClientTlsSpec(_Strict):
    """TLS files a client uses towards `https://` peers (PEM paths): `ca_file` verifies them
    (unset: the system's trust store); `cert_file` and `key_file`, both or neither, are the
    certificate it presents to peers that ask for one."""

    ca_file: PemFile | None = Field(default=None, alias="caFile")
    cert_file: PemFile | None = Field(default=None, alias="certFile")
    key_file: PemFile | None = Field(default=None, alias="keyFile")

    @model_validator(mode="after")
    def _pair(self) -> ClientTlsSpec:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("certFile and keyFile go together; give both or neither")
        return self


class ControlPlaneSpec(_Strict):
    """`tls`, when given, must name a client CA: the control plane serves mutual TLS only.

    `http_sd_port` serves the engines' Prometheus HTTP service discovery (`/sd/engines`, over the
    same TLS when `tls` is set); unset, none is served (`up --prometheus` then picks a free port).
    `replica_tls` is how its health checks of `https://` external replicas verify them (and the
    client certificate they present); `orchestrator control-plane --replica-tls-*` overrides it.
    """

    grpc_port: Port = Field(default=DEFAULT_CONTROL_PLANE_GRPC_PORT, alias="grpcPort")
    http_sd_port: Port | None = Field(default=None, alias="httpSdPort")
    tls: ServerTlsSpec | None = None
    replica_tls: ClientTlsSpec | None = Field(default=None, alias="replicaTls")

    @field_validator("tls")
    @classmethod
    def _mutual(cls, value: ServerTlsSpec | None) -> ServerTlsSpec | None:
        if value is not None and value.client_ca_file is None:
            raise ValueError(
                "clientCaFile is required: the control plane accepts only callers with a "
                "client certificate signed by it (mutual TLS)"
            )
        return value


class ExportersSpec(_Strict):
    """`orchestrator up` serves node k's exporter on `port + k`; `port: 0` lets each exporter pick
    a free port (the banner and the local Prometheus take the ports actually bound), for tests and
    busy machines where a run of consecutive free ports cannot be promised."""

    port: PortOrAny = DEFAULT_EXPORTER_PORT


class OrchestratorConfig(_Strict):
    """The whole desired state: sites, pools, and the services' settings. Frozen and validated."""

    api_version: Literal["orchestrator/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Orchestrator"]
    model: Annotated[str, Field(min_length=1)] = DEFAULT_MODEL
    sites: Annotated[dict[Name, SiteSpec], Field(min_length=1)]
    pools: tuple[PoolSpec, ...]
    router: RouterSpec = RouterSpec()
    control_plane: ControlPlaneSpec = Field(default=ControlPlaneSpec(), alias="controlPlane")
    exporters: ExportersSpec = ExportersSpec()
    fabric_health: FabricHealthSpec = Field(default=FabricHealthSpec(), alias="fabricHealth")

    _bare_sites = field_validator("sites", mode="before")(bare_sites)

    @model_validator(mode="after")
    def _consistent(self) -> OrchestratorConfig:
        problems = cross_field_problems(
            {name: site.rtt_ms for name, site in self.sites.items()},
            self.pools,
            service_ports(
                {
                    "router": self.router,
                    "controlPlane": self.control_plane,
                    "exporters": self.exporters,
                }
            ),
        )
        if problems:
            raise ConfigProblems(problems)
        if self.router.latency_scale is None:
            scales = [p.time_scale for p in self.pools if p.time_scale is not None]
            router = self.router.model_copy(update={"latency_scale": max(scales, default=1.0)})
            return self.model_copy(update={"router": router})
        return self

    @property
    def launched_pools(self) -> tuple[PoolSpec, ...]:
        """The pools whose replicas the control plane starts and keeps at size (not external)."""
        return tuple(pool for pool in self.pools if pool.engine in _LAUNCHED)

    def pool(self, name: str) -> PoolSpec:
        """The pool called `name`; raises NOT_FOUND naming the pools there are."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        known = ", ".join(p.name for p in self.pools) or "none"
        raise OrchestratorError(
            ErrorCode.NOT_FOUND, f"unknown pool {name!r}; pools: {known}", param="pool"
        )

    def rtt_ms(self, site: str, other: str) -> float:
        """Round trip between two configured sites in ms (0 within a site), either direction."""
        if site == other:
            return 0.0
        given = self.sites[site].rtt_ms.get(other)
        return given if given is not None else self.sites[other].rtt_ms[site]

    def site_records(self) -> Mapping[str, Site]:
        """The sites as routing-table records, each with the RTT (s) to every other site."""
        return MappingProxyType(
            {
                name: Site(
                    name,
                    {
                        other: self.rtt_ms(name, other) / 1000.0
                        for other in self.sites
                        if other != name
                    },
                )
                for name in self.sites
            }
        )
