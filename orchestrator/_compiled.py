"""Which modules the build compiles with mypyc, and loading their sources when the build is stale.

setup.py compiles `COMPILED_MODULES` (the virtual-time simulation's engine, step cost and fleet,
and the routing decision the live router shares) into C extensions beside their sources and
records a digest of those sources. A compiled extension shadows its `.py` file, so after an edit
(an editable install is rebuilt only by the next `pip install -e`), or with ORCHESTRATOR_PURE=1
set, `use_sources_if_stale` makes all of them load from their sources: all or none, because
compiled modules call each other's classes directly, not through the module. docs/compiled.md.

Standard library only: setup.py reads this file before the package is installed.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

COMPILED_MODULES = (
    "orchestrator.admission.controller",
    "orchestrator.bench.fast_step_cost",
    "orchestrator.bench.virtual_fleet",
    "orchestrator.fleet.step_cost",
    "orchestrator.forwarding.attempts",
    "orchestrator.forwarding.dispatcher",
    "orchestrator.forwarding.event_stream",
    "orchestrator.forwarding.loop_metrics",
    "orchestrator.forwarding.metrics",
    "orchestrator.forwarding.replica_connection",
    "orchestrator.forwarding.upstream",
    "orchestrator.forwarding.upstream_response",
    "orchestrator.frontends.http.app",
    "orchestrator.frontends.http.connection",
    "orchestrator.frontends.http.context",
    "orchestrator.frontends.http.framing",
    "orchestrator.frontends.http.request_reader",
    "orchestrator.router_service",
    "orchestrator.routing.context",
    "orchestrator.routing.estimator",
    "orchestrator.routing.fleet_state",
    "orchestrator.routing.in_flight_history",
    "orchestrator.routing.memo",
    "orchestrator.routing.others_estimate",
    "orchestrator.routing.plugins.filters.fabric_healthy",
    "orchestrator.routing.plugins.filters.healthy",
    "orchestrator.routing.plugins.filters.load_known",
    "orchestrator.routing.plugins.filters.model_served",
    "orchestrator.routing.plugins.filters.not_draining",
    "orchestrator.routing.plugins.filters.slo_reserved",
    "orchestrator.routing.plugins.pickers.max_score",
    "orchestrator.routing.plugins.pickers.power_of_two",
    "orchestrator.routing.plugins.pickers.round_robin",
    "orchestrator.routing.plugins.scorers.capacity_headroom",
    "orchestrator.routing.plugins.scorers.latency_slo",
    "orchestrator.routing.plugins.scorers.least_requests",
    "orchestrator.routing.plugins.scorers.prefix_affinity",
    "orchestrator.routing.plugins.scorers.site_locality",
    "orchestrator.routing.plugins.scorers.utilised",
    "orchestrator.routing.profile",
    "orchestrator.routing.registry",
    "orchestrator.routing.reservation",
    "orchestrator.routing.sampling",
    "orchestrator.routing.signals",
    "orchestrator.routing.stats",
    "orchestrator.routing.step_curve",
    "orchestrator.routing.views",
    "orchestrator.sim.batcher",
    "orchestrator.sim.latency_record",
    "orchestrator.sim.sequences",
    "orchestrator.sim.virtual",
)
SOURCES_RECORD = "orchestrator/_compiled_sources.txt"  # relative to the package's parent
PURE_ENV = "ORCHESTRATOR_PURE"


def source_path(module: str) -> str:
    """`orchestrator.sim.batcher` → `orchestrator/sim/batcher.py`."""
    return module.replace(".", "/") + ".py"


def sources_digest(root: Path) -> str:
    """A digest of the compiled modules' names and of every source of the package under `root`.

    Every source, not only the compiled ones: mypyc copies the values of `Final` constants a
    compiled module imports (and relies on the classes of records it reads), so an edit to a
    module that is not compiled can make the compiled code stale too. About 10 ms at import."""
    digest = hashlib.blake2b(digest_size=16)
    for module in COMPILED_MODULES:
        digest.update(module.encode() + b"\0")
    package = root / "orchestrator"
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


SHARED_LIBRARY = "orchestrator_native__mypyc"  # all compiled modules' code, at the tree's root


def _has_extension(stem: Path) -> bool:
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return any(stem.with_name(stem.name + suffix).exists() for suffix in suffixes)


def compiled_present(root: Path) -> bool:
    """Whether any extension file lies in the package (a build, or what is left of one)."""
    package = root / "orchestrator"
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return _has_extension(root / SHARED_LIBRARY) or any(
        path.name.endswith(suffixes) for path in package.rglob("*.so")
    )


def compiled_complete(root: Path) -> bool:
    """Whether every compiled module's extension and the shared library are there."""
    stems = [root / module.replace(".", "/") for module in COMPILED_MODULES]
    return all(_has_extension(stem) for stem in [*stems, root / SHARED_LIBRARY])


class _SourceFinder:
    """Finds the compiled modules' `.py` files, ahead of their extensions."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        # Any module of the package with a source file, not only today's list: an extension
        # left by an older build of a module no longer compiled must not run either.
        if not fullname.startswith("orchestrator."):
            return None
        source = self._root / source_path(fullname)
        if not source.is_file():
            return None  # a package (its __init__ holds no compiled code) or not ours
        return importlib.util.spec_from_file_location(fullname, source)


def use_sources_if_stale(root: Path) -> str:
    """Load the compiled modules from source when asked to or when the build is stale.

    Returns what runs: "pure" (nothing compiled), "compiled", "sources (ORCHESTRATOR_PURE)" or
    "sources (stale build)"; the last also warns."""
    if not compiled_present(root):
        return "pure"
    if pure_requested():
        state = f"sources ({PURE_ENV})"
    else:
        record = root / SOURCES_RECORD
        built = record.read_text().split("\n")[0] if record.exists() else ""
        if built == sources_digest(root) and compiled_complete(root):
            return "compiled"
        state = "sources (stale build)"
        warnings.warn(
            "orchestrator: the mypyc-compiled modules do not match their sources (edited since "
            "the last `pip install -e`); running the sources. Rebuild with scripts/install.sh.",
            RuntimeWarning,
            stacklevel=3,
        )
    sys.meta_path.insert(0, _SourceFinder(root))
    return state
