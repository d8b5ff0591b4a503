"""`orchestrator status`'s capacity section: learned capacity per generation and software version.

An upgrade shows here as a row of its own (the new engine version beside the old one while a
rolling upgrade is under way) and, once the control plane has seen the pool's capacity move at an
unchanged size, as a step change on the pool.
"""

from __future__ import annotations

from collections import defaultdict

from orchestrator.controlplane.admin_client import Status


def capacity_rows(status: Status) -> list[tuple[str, str, int, float]]:
    """(generation, engine version, ready replicas, their summed capacity tok/s), sorted."""
    totals: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
    for replica in status.replicas:
        if replica.state == "ready":
            totals[(replica.generation, replica.engine_version)].append(
                replica.capacity_tokens_per_s
            )
    return [(gen, version, len(caps), sum(caps)) for (gen, version), caps in sorted(totals.items())]


def format_capacity(status: Status) -> str:
    rows = capacity_rows(status)
    header = ("GENERATION", "ENGINE VERSION", "READY", "CAPACITY tok/s", "PER REPLICA")
    cells = [
        (gen, version or "-", str(count), f"{total:.0f}", f"{total / count:.0f}")
        for gen, version, count, total in rows
    ]
    widths = [max(len(line[i]) for line in (header, *cells)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (header, *cells)
    ]
    steps = [
        f"{p.name}: {p.capacity_steps} capacity step change(s) at an unchanged size, the last"
        f" x{p.last_step_ratio:.2f}"
        for p in status.pools
        if p.capacity_steps and p.last_step_ratio is not None
    ]
    return "\n".join(["learned capacity by generation and engine version", *lines, *steps])
