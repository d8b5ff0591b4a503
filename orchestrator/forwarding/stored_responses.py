"""Which replica holds a stored response, so that retrieving, cancelling or continuing it
(`previous_response_id`) goes there and nowhere else.

An engine keeps the responses it made in its own memory; no other replica can answer for them.
Each router remembers, in a bounded map (oldest forgotten first), the replica of every response
it relayed. A response this router did not relay (another router made it, or it was forgotten)
is looked for on every replica of the table at once with `GET /v1/responses/{id}`: ids are
random, so only the holder answers 200. A holder that left the table, or an id no replica
holds, is NOT_FOUND with a message that says which; never another replica's answer.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import Replica
from orchestrator.forwarding.event_stream import RESPONSES_PATH
from orchestrator.forwarding.passthrough import Passthrough, ReplicaUnreachable
from orchestrator.table.snapshot import RoutingTable

DEFAULT_CAPACITY: Final = 100_000  # about 10 MB of ids; older ones are found by asking
LOOKUP_TIMEOUT_S: Final = 5.0
_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,256}")


def check_response_id(response_id: object, param: str | None = None) -> str:
    """A response id safe to put in a path: INVALID_ARGUMENT when it is not a string, NOT_FOUND
    when it is one no replica could hold."""
    if not isinstance(response_id, str):
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT, f"`{param or 'id'}` must be a string", param=param
        )
    if not _ID.fullmatch(response_id):
        raise OrchestratorError(
            ErrorCode.NOT_FOUND, f"Response with id {response_id[:64]!r} not found.", param=param
        )
    return response_id


class StoredResponses:
    """Response id → holder, bounded, with a lookup across the table for ids not remembered."""

    def __init__(
        self,
        table: Callable[[], RoutingTable],
        passthrough: Passthrough,
        clock_now: Callable[[], float],
        *,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._table = table
        self._passthrough = passthrough
        self._now = clock_now
        self.capacity = capacity
        self._homes: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._homes)

    def remember(self, response_id: str | None, replica: Replica) -> None:
        """`replica` made the response `response_id` (None: the answer carried no id)."""
        if response_id is None or not _ID.fullmatch(response_id):
            return
        homes = self._homes
        homes[response_id] = replica.replica_id
        homes.move_to_end(response_id)
        while len(homes) > self.capacity:
            homes.popitem(last=False)

    async def holder(self, response_id: str, *, param: str | None = None) -> Replica:
        """The replica holding `response_id`; raises NOT_FOUND when it is gone or unknown."""
        table = self._table()
        replica_id = self._homes.get(response_id)
        if replica_id is not None:
            replica = table.replica(replica_id)
            if replica is None:
                raise OrchestratorError(
                    ErrorCode.NOT_FOUND,
                    f"Response with id {response_id!r} was stored on replica {replica_id}, "
                    "which is no longer serving; the response is lost with it.",
                    param=param,
                )
            return replica
        found = await self._look_for(response_id, table)
        if found is None:
            raise OrchestratorError(
                ErrorCode.NOT_FOUND, f"Response with id {response_id!r} not found.", param=param
            )
        self.remember(response_id, found)
        return found

    async def _look_for(self, response_id: str, table: RoutingTable) -> Replica | None:
        path = f"{RESPONSES_PATH}/{response_id}"
        deadline_s = self._now() + LOOKUP_TIMEOUT_S

        async def holds(replica: Replica) -> Replica | None:
            try:
                reply = await self._passthrough.send(
                    replica, "GET", path, b"", deadline_s=deadline_s
                )
            except ReplicaUnreachable:
                return None
            return replica if reply.status == 200 else None

        asks = [asyncio.create_task(holds(r)) for r in table.replicas]
        try:
            for done in asyncio.as_completed(asks):
                found = await done
                if found is not None:
                    return found
        finally:
            for ask in asks:
                ask.cancel()
        return None
