"""A router's settings: its latency targets and limits (`RouterSettings`), what its command line
gives it (`RouterConfig`), and the built-in profile a name stands for."""

from __future__ import annotations

import os
import socket
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field, InstanceOf

from orchestrator.admission.settings import AdmissionSettings
from orchestrator.config.router_timing import REQUEST_DEADLINE_S, RouterTimingSpec
from orchestrator.config.settings_model import CheckedSettings
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.slo import MLPERF_TPOT_S, SloTargets
from orchestrator.forwarding.breaker import BreakerSettings
from orchestrator.forwarding.dispatch_settings import (
    DEFAULT_FIRST_BYTE_TIMEOUT_S,
    DEFAULT_MIGRATION_ATTEMPTS,
    DEFAULT_STALL_TIMEOUT_S,
    DispatchSettings,
)
from orchestrator.forwarding.upstream_settings import UpstreamSettings
from orchestrator.routing.profile import Profile
from orchestrator.routing.profiles import DEFAULT_PROFILE, builtin_profiles

__all__ = ["REQUEST_DEADLINE_S", "RouterConfig", "RouterSettings", "profile_named"]
Bound = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class RouterSettings(RouterTimingSpec, CheckedSettings):
    """Targets and limits of one router; a bad value raises INVALID_ARGUMENT naming the field.

    `slo` holds the latency targets per model and request class, in seconds on real hardware
    (MLPerf's 3 s TTFT and 80 ms TPOT unless the operator states others). `latency_scale` says
    only that the replicas are simulated and run that many times slower (their `timeScale`):
    every time the router compares against (targets, deadline, queue timeout) is stretched by it.
    The deadline, connect timeout, scrape interval and load-report age are the `router.timing`
    section's (`config/router_timing.py`; the file-fed scraper sets its own bound on a load's
    age from its round length). `first_byte_timeout_s` and `stall_timeout_s` bound one attempt
    at a stream (its first bytes; the longest gap between its chunks; None: no bound), stretched
    by the latency scale like the deadline; `migration_attempts` caps the replicas tried to
    continue one stream (`forwarding/dispatcher.py`); the `router.attempts` section sets them
    (`config/attempts.py`, where 0 is "no bound"). The breaker, connection-pool and admission
    settings are their sections' models.
    """

    latency_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    slo: InstanceOf[SloTargets] = Field(default_factory=SloTargets)
    first_byte_timeout_s: Bound | None = DEFAULT_FIRST_BYTE_TIMEOUT_S
    stall_timeout_s: Bound | None = DEFAULT_STALL_TIMEOUT_S
    migration_attempts: Annotated[int, Field(ge=0)] = DEFAULT_MIGRATION_ATTEMPTS
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)

    @property
    def wall_slo(self) -> SloTargets:
        """The targets in wall seconds (stretched by the latency scale)."""
        return self.slo.scaled(self.latency_scale)

    @property
    def reference_tpot_s(self) -> float:
        """The TPOT target (wall s) the replicas' capacity priors are stated at: MLPerf's."""
        return MLPERF_TPOT_S * self.latency_scale

    @property
    def scaled_deadline_s(self) -> float:
        return self.request_deadline_s * self.latency_scale

    def dispatch_settings(self, slo: SloTargets) -> DispatchSettings:
        """The dispatcher's bounds, in wall seconds (attempt timeouts stretched by the scale)."""
        scale = self.latency_scale
        first_byte_s, stall_s = self.first_byte_timeout_s, self.stall_timeout_s
        return DispatchSettings(
            slo=slo,
            connect_timeout_s=self.connect_timeout_s,
            first_byte_timeout_s=None if first_byte_s is None else first_byte_s * scale,
            stall_timeout_s=None if stall_s is None else stall_s * scale,
            migration_attempts=self.migration_attempts,
        )


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """What the command line gives a router: where the replicas are and how to route to them."""

    replicas_file: Path
    profile: str = DEFAULT_PROFILE
    settings: RouterSettings = field(default_factory=RouterSettings)


def profile_named(name: str) -> Profile:
    """A fresh instance of a built-in profile; unknown names are an error listing the known ones."""
    profiles = builtin_profiles()
    found = profiles.get(name)
    if found is None:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown routing profile {name!r}; known profiles: {', '.join(sorted(profiles))}",
            param="profile",
        )
    return found


def process_salt() -> int:
    """This router process's identity (host name and process id: a pod's name, a worker's pid),
    for `Profile.reseed`, so routers sharing a fleet draw apart."""
    return zlib.crc32(f"{socket.gethostname()}:{os.getpid()}".encode())


def router_profile(name: str) -> Profile:
    """`profile_named(name)`, reseeded with this process's identity: what a serving router uses."""
    profile = profile_named(name)
    profile.reseed(process_salt())
    return profile
