"""The router's flags for how it treats replicas: circuit breakers and the connection pool.

Generated from the `router.breaker` and `router.upstream` sections' fields (`config/breaker.py`,
`config/upstream.py`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from orchestrator.config.breaker import BreakerSpec
from orchestrator.config.flags import add_flags as add_model_flags
from orchestrator.config.flags import from_args
from orchestrator.config.upstream import UpstreamSpec

if TYPE_CHECKING:
    from orchestrator.forwarding.upstream_settings import UpstreamSettings
    from orchestrator.security.files import TlsFiles


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the breaker and connection-pool flags to `orchestrator router`."""
    add_model_flags(router, BreakerSpec)
    add_model_flags(router, UpstreamSpec)


def breaker_settings(args: argparse.Namespace) -> BreakerSpec:
    return from_args(BreakerSpec, args)


def upstream_settings(args: argparse.Namespace, replica_tls: TlsFiles | None) -> UpstreamSettings:
    """The pool's limits from the flags, with the replicas' TLS files."""
    from orchestrator.forwarding.upstream_settings import UpstreamSettings

    limits = from_args(UpstreamSpec, args)
    return UpstreamSettings.model_validate({**limits.model_dump(), "replica_tls": replica_tls})
