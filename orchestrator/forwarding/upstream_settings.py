"""The upstream pool's settings model, kept out of `upstream.py` so that module can be compiled
(mypyc cannot compile a pydantic model's annotations; docs/compiled.md)."""

from __future__ import annotations

from pydantic import InstanceOf

from orchestrator.config.upstream import UpstreamSpec
from orchestrator.security.files import TlsFiles

__all__ = ["UpstreamSettings"]


class UpstreamSettings(UpstreamSpec):
    """The `router.upstream` limits (`config/upstream.py`) and `replica_tls`, which verifies
    `https` replicas (its CA; None: the system's trust store) and, with a cert, presents that
    to them."""

    replica_tls: InstanceOf[TlsFiles] | None = None
