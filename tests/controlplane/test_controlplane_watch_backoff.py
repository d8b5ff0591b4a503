"""The routing-table watch against a control plane that is not there: one gRPC channel for all
its calls, and waits between them that double per failure with full jitter."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import socket
from typing import Any

import pytest

from orchestrator.controlplane import watch_client
from orchestrator.controlplane.watch_client import follow_routing_table
from orchestrator.table.source import TableHolder

FAILURES = 6
WAIT = re.compile(r"next call in ([\d.]+) s \(at most ([\d.]+) s\)")


def test_a_watch_backs_off_with_jitter_on_one_channel(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    opened: list[str] = []
    real_channel = watch_client.aio_channel

    def counted(target: str, *args: Any) -> Any:
        opened.append(target)
        return real_channel(target, *args)

    monkeypatch.setattr(watch_client, "aio_channel", counted)
    caplog.set_level(logging.DEBUG, logger=watch_client.__name__)

    def waits() -> list[tuple[float, float]]:
        found = (WAIT.search(r.getMessage()) for r in caplog.records)
        return [(float(m[1]), float(m[2])) for m in found if m]

    async def run(target: str) -> None:
        watch = asyncio.create_task(
            follow_routing_table(target, TableHolder(), retry_s=0.01, rng=random.Random(3))
        )
        try:
            async with asyncio.timeout(10):
                while len(waits()) < FAILURES:
                    await asyncio.sleep(0.01)
        finally:
            watch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await watch

    with socket.socket() as bound:  # bound, never listening: every connection is refused
        bound.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{bound.getsockname()[1]}"
        asyncio.run(run(target))

    delays, ceilings = zip(*waits()[:FAILURES], strict=True)
    assert list(ceilings) == pytest.approx([0.01 * 2**k for k in range(FAILURES)])
    assert all(0 <= delay <= ceiling for delay, ceiling in zip(delays, ceilings, strict=True))
    assert len({round(d / c, 3) for d, c in zip(delays, ceilings, strict=True)}) == FAILURES
    assert "unreachable (UNAVAILABLE)" in caplog.text
    assert opened == [target]
