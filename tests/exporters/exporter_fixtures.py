"""The checked-in node fixtures (one fake `/sys` per NIC driver) and their golden expositions.

`python tests/exporters/exporter_fixtures.py` rewrites the golden files after a deliberate change;
review the diff before committing it.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from orchestrator.exporters.exposition import NodeExporter
from orchestrator.exporters.server import build_exporter

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
GOLDEN = HERE / "golden"


@dataclass(frozen=True, slots=True)
class NodeFixture:
    """One fixture node: its driver's tree (`<driver>/sys`, `<driver>/ethtool`) and labels."""

    driver: str
    node: str
    site: str

    @property
    def directory(self) -> Path:
        return FIXTURES / self.driver

    @property
    def golden(self) -> Path:
        return GOLDEN / f"{self.driver}.prom"

    def copy_to(self, target: Path) -> NodeFixture:
        """A copy of this fixture's tree under `target` (for tests that change files)."""
        shutil.copytree(self.directory, target / self.driver, symlinks=True)
        return CopiedFixture(self.driver, self.node, self.site, target)


@dataclass(frozen=True, slots=True)
class CopiedFixture(NodeFixture):
    base: Path

    @property
    def directory(self) -> Path:
        return self.base / self.driver


NODES = (
    NodeFixture("mlx5", "kr-mi300x-node-0", "kr"),
    NodeFixture("bnxt_re", "us-mi355x-node-0", "us"),
    NodeFixture("ionic", "us-mi355x-node-1", "us"),
)
BY_DRIVER = {fixture.driver: fixture for fixture in NODES}


def exporter_for(fixture: NodeFixture) -> NodeExporter:
    """The exporter over a fixture, reading ethtool text files; a frozen timer makes the scrape
    duration 0 so the exposition is reproducible."""
    return build_exporter(
        fixture.directory / "sys",
        node=fixture.node,
        site=fixture.site,
        ethtool_dir=fixture.directory / "ethtool",
        rocm_version_file=fixture.directory / "rocm" / ".info" / "version",
        timer=lambda: 0.0,
    )


def exposition(exporter: NodeExporter) -> str:
    """What `/metrics` serves for this exporter (Prometheus text format 0.0.4)."""
    registry = CollectorRegistry()
    registry.register(exporter)
    return generate_latest(registry).decode()


def main() -> int:
    GOLDEN.mkdir(exist_ok=True)
    for fixture in NODES:
        fixture.golden.write_text(exposition(exporter_for(fixture)))
        print(f"wrote {fixture.golden}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
