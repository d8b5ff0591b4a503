"""The router's latency-target flags: `--ttft`, `--tpot`, `--e2e` and `--class-slo`.

Generated from the `slo` section's fields (`config/slo.py`). They override the fleet-wide values
of the replicas file's `slo:` section; a router following the control plane has only these.
"""

from __future__ import annotations

import argparse

from orchestrator.config.flags import add_flags as add_model_flags
from orchestrator.config.flags import given_args
from orchestrator.config.slo import SloSpec, TargetSpec
from orchestrator.core.slo import SloTarget, SloTargets


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the latency-target flags to `orchestrator router`."""
    add_model_flags(router, SloSpec, unset="the replicas file's")


def targets(args: argparse.Namespace, base: SloTargets | None = None) -> SloTargets:
    """`base` (the replicas file's targets, or MLPerf's) with the flags given applied over it;
    a class's flag states its whole target (an e2e left out is none)."""
    given = given_args(SloSpec, args)
    found = (base or SloTargets()).with_default(given.get("ttft_s"), given.get("tpot_s"))
    if "e2e_s" in given:
        default = found.default
        found = SloTargets(
            SloTarget(default.ttft_s, default.tpot_s, given["e2e_s"]), found.classes, found.models
        )
    classes: dict[str, TargetSpec] = given.get("classes", {})
    return found.with_classes({name: spec.over(SloTarget()) for name, spec in classes.items()})
