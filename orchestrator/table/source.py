"""Where routers get the routing table: a `TableSource` hands out snapshots and announces new ones.

`TableHolder` is the router's copy. A static replicas file feeds it now; the control plane's
watch stream feeds the same holder later, so the router never knows which one it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from orchestrator.table.snapshot import EMPTY_TABLE, RoutingTable


@runtime_checkable
class TableSource(Protocol):
    def snapshot(self) -> RoutingTable: ...

    def watch(self) -> AsyncIterator[RoutingTable]: ...


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
