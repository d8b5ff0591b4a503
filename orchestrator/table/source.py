"""The router's copy of the routing table (`TableHolder`): the current snapshot, and a wait for
the next one.

A replicas file (`table/static_file.py`) or the control plane's watch stream
(`controlplane/watch_client.py`) feeds it; the router reads only the holder, so it never knows
which of the two it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from orchestrator.table.snapshot import EMPTY_TABLE, RoutingTable


class TableHolder:
    """The current table plus a way to wait for the next one; only newer versions are taken."""

    def __init__(self, table: RoutingTable = EMPTY_TABLE) -> None:
        self._table = table
        self._changed = asyncio.Event()

    def snapshot(self) -> RoutingTable:
        return self._table

    def replace(self, table: RoutingTable) -> bool:
        """Install `table` if it is newer; returns whether it was installed."""
        if table.version <= self._table.version and self._table is not EMPTY_TABLE:
            return False
        self._table = table
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return True

    async def watch(self) -> AsyncIterator[RoutingTable]:
        """Yield the current table, then each newer one as it arrives."""
        seen = -1
        while True:
            table = self._table
            if table.version != seen:
                seen = table.version
                yield table
            await self._changed.wait()
