"""The health reporter against a real gRPC server on loopback that records `ReportNodeHealth`:
it reports changes at once, repeats itself for a restarted registry, and rides out a control
plane that is not there yet or goes away (reconnecting, with one warning per outage)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import grpc
import pytest

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config import FabricHealthSpec
from orchestrator.fabric.health import CounterValue, NodeReading, Signal
from orchestrator.fabric.reporter import HealthReporter

NAMES = {pb.NODE_HEALTH_HEALTHY: "healthy", pb.NODE_HEALTH_UNHEALTHY: "unhealthy",
         pb.NODE_HEALTH_DEGRADED: "degraded"}  # fmt: skip


class RecordingControlPlane(pb_grpc.ControlPlaneServiceServicer):
    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []

    async def ReportNodeHealth(
        self, request: pb.ReportNodeHealthRequest, context: Any
    ) -> pb.ReportNodeHealthResponse:
        self.reports.append((request.node, NAMES[request.health]))
        return pb.ReportNodeHealthResponse()


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_reports_changes_at_once_and_repeats_itself_every_refresh() -> None:
    asyncio.run(_reports_changes())


async def _reports_changes() -> None:
    recorder = RecordingControlPlane()
    server = grpc.aio.server()
    pb_grpc.add_ControlPlaneServiceServicer_to_server(recorder, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    clock = Clock()
    port_active = {"value": True}

    def read(at_s: float) -> NodeReading:
        counters = {Signal.CARRIER_CHANGES: {"eth0": CounterValue(2)}}
        return NodeReading(at_s, counters, port_active["value"], 0.3)

    reporter = HealthReporter(
        node_key="ray-node-1", read=read, control_plane=f"127.0.0.1:{port}",
        spec=FabricHealthSpec(holdDownS=2), refresh_s=5.0, clock=clock,
    )  # fmt: skip
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{closed.getsockname()[1]}"
    async with grpc.aio.insecure_channel(nowhere) as channel:
        stub = pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
        await reporter.beat(stub)  # nobody there: logged, retried on the next beat
        assert reporter.reported is None
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            for second in range(13):
                clock.now_s = float(second + 1)
                port_active["value"] = not 3 <= second < 5
                await reporter.beat(stub)
        finally:
            await server.stop(None)
    assert recorder.reports == [
        ("ray-node-1", "healthy"),  # t=1
        ("ray-node-1", "unhealthy"),  # t=4, at once
        ("ray-node-1", "healthy"),  # t=8: clean since t=6, held down 2 s
        ("ray-node-1", "healthy"),  # t=13: unchanged, repeated after refresh_s
    ]


def test_run_reports_to_a_control_plane_that_comes_late_and_again_after_it_restarts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="orchestrator.fabric.reporter"):
        first, second = asyncio.run(_rides_out_outages())
    assert first == [("ray-node-2", "unhealthy")]
    assert second[:1] == [("ray-node-2", "unhealthy")], "repeated to the restarted control plane"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, "one warning per outage: before, between and after the two runs"
    assert sum("again" in r.getMessage() for r in caplog.records) == 2


async def _rides_out_outages() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    reporter = HealthReporter(
        node_key="ray-node-2", read=lambda at_s: NodeReading(at_s, {}, False, 0.3),
        control_plane=f"127.0.0.1:{port}", spec=FabricHealthSpec(), interval_s=0.05,
        refresh_s=0.2,
    )  # fmt: skip
    task = asyncio.create_task(reporter.run())
    recorders = []
    try:
        await asyncio.sleep(0.3)  # nobody listens yet: every beat fails
        assert not task.done() and reporter.reported is None
        for _ in range(2):
            recorder = RecordingControlPlane()
            recorders.append(recorder)
            server = grpc.aio.server()
            pb_grpc.add_ControlPlaneServiceServicer_to_server(recorder, server)  # type: ignore[no-untyped-call]
            server.add_insecure_port(f"127.0.0.1:{port}")
            await server.start()
            try:
                async with asyncio.timeout(10.0):
                    while not recorder.reports:
                        await asyncio.sleep(0.02)
            finally:
                await server.stop(None)
            await asyncio.sleep(0.3)  # down again: failures, retried
            assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return recorders[0].reports, recorders[1].reports
