"""Report a node's health to the control plane (`ReportNodeHealth`) as its counters change.

Every `interval_s` it reads the node (an exporter scrape, in process), evaluates it, and reports
when the verdict changes, and again every `refresh_s` so a restarted registry learns it too. A
control plane that does not answer (down, or refusing the certificate) is retried over a fresh
channel, which re-reads the TLS files, so a rotated client certificate is picked up, after a
jittered delay that grows from `interval_s` to `MAX_RETRY_S` while it stays down (`core.backoff`);
the reporter never stops the node's exporter or the stack it runs in. Used by `orchestrator up`
(one per simulated node) and by `orchestrator exporter --control-plane` on a real node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Final

import grpc

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config.fabric_health import FabricHealthSpec
from orchestrator.core.backoff import Backoff
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.records import NodeHealth
from orchestrator.fabric.health import HealthVerdict, NodeHealthEvaluator, NodeReading
from orchestrator.security.files import TlsFiles
from orchestrator.security.grpc_tls import aio_channel

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S: Final = 1.0
DEFAULT_REFRESH_S: Final = 5.0
MAX_RETRY_S: Final = 10.0
_CALL_TIMEOUT_S: Final = 5.0
HEALTH_TO_PB: Final = MappingProxyType(
    {
        NodeHealth.HEALTHY: pb.NODE_HEALTH_HEALTHY,
        NodeHealth.DEGRADED: pb.NODE_HEALTH_DEGRADED,
        NodeHealth.UNHEALTHY: pb.NODE_HEALTH_UNHEALTHY,
    }
)


class HealthReporter:
    """Evaluates one node and reports it as `node_key`: a Ray node id, or a Kubernetes node name
    that the control plane matches to Ray nodes labelled `k8s-node=<name>`. `read(at_s)` returns
    the node's reading at monotonic time `at_s`. `tls`
    None speaks plaintext; else TLS, presenting `tls.cert` when given (the control plane serves
    mutual TLS only)."""

    def __init__(
        self,
        *,
        node_key: str,
        read: Callable[[float], NodeReading],
        control_plane: str,
        spec: FabricHealthSpec,
        interval_s: float = DEFAULT_INTERVAL_S,
        refresh_s: float = DEFAULT_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        tls: TlsFiles | None = None,
    ) -> None:
        self.node_key = node_key
        self._read = read
        self._control_plane = control_plane
        self._tls = tls
        self._evaluator = NodeHealthEvaluator(spec)
        self._interval_s = interval_s
        self._backoff = Backoff(interval_s, max(interval_s, MAX_RETRY_S))
        self._refresh_s = refresh_s
        self._clock = clock
        self.verdict: HealthVerdict | None = None
        self.reported: NodeHealth | None = None
        self._reported_at_s = float("-inf")
        self._failing = False

    async def run(self) -> None:
        """Read, evaluate and report until cancelled; after a failed report the channel is
        opened afresh (re-reading the TLS files) for the next beat."""
        while True:
            try:
                channel = aio_channel(self._control_plane, self._tls)
            except OrchestratorError as error:  # files mid-rotation, or not mounted yet
                self._note_failure(error.message)
                await asyncio.sleep(self._backoff.next_delay_s())
                continue
            async with channel:
                stub: Any = pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
                while await self.beat(stub):
                    self._backoff.reset()
                    await asyncio.sleep(self._interval_s)
            await asyncio.sleep(self._backoff.next_delay_s())

    async def beat(self, stub: Any) -> bool:
        """One read, evaluation and (when due) report through `stub`; False when the report
        failed (the control plane is down or refused the connection)."""
        now = self._clock()
        try:
            reading = await asyncio.to_thread(self._read, now)
        except Exception:  # a reading that fails this time may succeed the next
            log.exception("reading node %s failed; health is evaluated next beat", self.node_key)
            return True
        verdict = self._evaluator.observe(reading)
        if self.verdict is None or verdict.health is not self.verdict.health:
            log.info(
                "node %s is %s%s", self.node_key, verdict.health.value,
                f": {'; '.join(verdict.reasons)}" if verdict.reasons else "",
            )  # fmt: skip
        self.verdict = verdict
        due = now - self._reported_at_s >= self._refresh_s
        if verdict.health is self.reported and not due:
            return True
        request = pb.ReportNodeHealthRequest(
            node=self.node_key, health=HEALTH_TO_PB[verdict.health]
        )
        try:
            await stub.ReportNodeHealth(request, timeout=_CALL_TIMEOUT_S)
        except grpc.RpcError as error:
            details = error.details() if isinstance(error, grpc.aio.AioRpcError) else None
            self._note_failure(f"{error.code()}: {details}" if details else str(error.code()))
            return False
        if self._failing:
            log.info("reporting node %s to %s again", self.node_key, self._control_plane)
        self._failing = False
        self.reported = verdict.health
        self._reported_at_s = now
        return True

    def _note_failure(self, why: str) -> None:
        if not self._failing:  # once per outage, not once a beat
            log.warning(
                "reporting node %s to %s failed (%s); retrying, at most %g s apart",
                self.node_key, self._control_plane, why, self._backoff.max_s,
            )  # fmt: skip
        self._failing = True


class ReporterThread:
    """A `HealthReporter` on an event loop of its own, for a process that has none (the
    `orchestrator exporter` command on a real node)."""

    def __init__(self, reporter: HealthReporter) -> None:
        self.reporter = reporter
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name="health-reporter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self.reporter.run())
        with contextlib.suppress(asyncio.CancelledError):
            self._loop.run_until_complete(self._task)
        self._loop.close()

    def stop(self) -> None:
        """Cancel the reporter and wait for its thread."""
        self._loop.call_soon_threadsafe(lambda: self._task.cancel() if self._task else None)
        self._thread.join(timeout=5.0)
