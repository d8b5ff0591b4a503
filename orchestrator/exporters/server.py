"""Serve one node's exporter over HTTP (`/metrics`), in a thread of the calling process.

`orchestrator exporter` runs one for the host; the embedded stack starts one per simulated node,
each on its own port, and stops them with the stack.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from orchestrator.exporters.ethtool import CommandEthtoolReader, EthtoolReader, FileEthtoolReader
from orchestrator.exporters.exposition import NodeCollector, NodeExporter
from orchestrator.exporters.hbm import HbmCollector
from orchestrator.exporters.roce import RoceCollector
from orchestrator.exporters.sysfs import SysfsRoot
from orchestrator.exporters.versions import VersionsCollector


def build_exporter(
    sysfs_root: Path | str,
    *,
    node: str,
    site: str,
    ethtool_dir: Path | str | None = None,
    ethtool: EthtoolReader | None = None,
    rocm_version_file: Path | str | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> NodeExporter:
    """A node's exporter over a sysfs root. PFC counters come from `ethtool`, else from files in
    `ethtool_dir` (`<netdev>.txt`), else from the `ethtool` binary (none when it is absent). The
    ROCm version is read from `rocm_version_file` (None: not read)."""
    if ethtool is None:
        ethtool = CommandEthtoolReader() if ethtool_dir is None else FileEthtoolReader(ethtool_dir)
    sysfs = SysfsRoot(sysfs_root)
    collectors: list[NodeCollector] = [
        RoceCollector(sysfs, ethtool), HbmCollector(sysfs),
        VersionsCollector(sysfs, rocm_version_file),
    ]  # fmt: skip
    return NodeExporter(collectors, node=node, site=site, timer=timer)


@dataclass(slots=True)
class ExporterHandle:
    """A running exporter: where it listens, its collector, and how to stop it."""

    host: str
    port: int
    exporter: NodeExporter
    registry: CollectorRegistry
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """The scrape URL, `http://host:port/metrics`."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5.0)
        self._server.server_close()


def serve_exporter(exporter: NodeExporter, *, host: str, port: int) -> ExporterHandle:
    """Serve `exporter` on `host:port` (0 picks a free port) from a daemon thread."""
    registry = CollectorRegistry()
    registry.register(exporter)
    server, thread = start_http_server(port, addr=host, registry=registry)
    return ExporterHandle(host, server.server_port, exporter, registry, server, thread)


def start_exporter(
    sysfs_root: Path | str,
    *,
    node: str,
    site: str,
    host: str = "127.0.0.1",
    port: int = 0,
    ethtool_dir: Path | str | None = None,
    rocm_version_file: Path | str | None = None,
) -> ExporterHandle:
    """Build a node's exporter over `sysfs_root` and serve it; see `build_exporter`."""
    exporter = build_exporter(
        sysfs_root, node=node, site=site, ethtool_dir=ethtool_dir,
        rocm_version_file=rocm_version_file,
    )  # fmt: skip
    return serve_exporter(exporter, host=host, port=port)
