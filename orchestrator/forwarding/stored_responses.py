"""Which replica holds a stored response, so that retrieving, cancelling or continuing it
(`previous_response_id`) goes there and nowhere else.

An engine keeps the responses it made in its own memory; no other replica can answer for them.
Each router remembers, in a bounded map (oldest forgotten first), the replica of every response
it relayed. A response this router did not relay (another router made it, or it was forgotten)
is looked for with `GET /v1/responses/{id}` on the replicas that could hold it (those of the
request's model, when it names one, that are not unhealthy): ids are random, so only the holder
answers 200. The lookup is bounded: concurrent lookups of one id share one, an id found nowhere
is remembered as missing for a few seconds, and beyond `max_lookups` at once the router answers
RESOURCE_EXHAUSTED (429) rather than fan out more. A holder that left the table, or an id no
replica holds, is NOT_FOUND with a message that says which; when no replica answered 200 but one
could not answer (unreachable, 5xx, timed out, unhealthy), it is UNAVAILABLE (503, retryable):
the holder may be that one. Never another replica's answer.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import Replica, ReplicaState
from orchestrator.forwarding.event_stream import RESPONSES_PATH
from orchestrator.forwarding.passthrough import Passthrough, ReplicaUnreachable
from orchestrator.table.snapshot import RoutingTable

DEFAULT_CAPACITY: Final = 100_000  # about 10 MB of ids; older ones are found by asking
LOOKUP_TIMEOUT_S: Final = 5.0
DEFAULT_MAX_LOOKUPS: Final = 64  # distinct ids looked for at once; more are refused (429)
MISSING_TTL_S: Final = 5.0  # how long an id found nowhere is answered NOT_FOUND without asking
MISSING_CAPACITY: Final = 10_000
_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,256}")
_Key = tuple[str, str | None]  # a response id, and the model it was asked for in (None: any)


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
    """Response id → holder, bounded, with a bounded lookup across the table for ids not
    remembered."""

    def __init__(
        self,
        table: Callable[[], RoutingTable],
        passthrough: Passthrough,
        clock_now: Callable[[], float],
        *,
        capacity: int = DEFAULT_CAPACITY,
        max_lookups: int = DEFAULT_MAX_LOOKUPS,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if max_lookups < 1:
            raise ValueError(f"max_lookups must be >= 1, got {max_lookups}")
        self._table = table
        self._passthrough = passthrough
        self._now = clock_now
        self.capacity = capacity
        self.max_lookups = max_lookups
        self._homes: OrderedDict[str, str] = OrderedDict()
        self._missing: OrderedDict[_Key, float] = OrderedDict()  # → when to ask again
        self._lookups: dict[_Key, asyncio.Future[Replica | None]] = {}

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

    async def holder(
        self, response_id: str, *, param: str | None = None, model: str | None = None
    ) -> Replica:
        """The replica holding `response_id` (a response of `model`, when known); raises
        NOT_FOUND when it is gone or unknown, UNAVAILABLE when a replica that may hold it did
        not answer, RESOURCE_EXHAUSTED when too many lookups are running."""
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
        not_found = OrchestratorError(
            ErrorCode.NOT_FOUND, f"Response with id {response_id!r} not found.", param=param
        )
        key = (response_id, model)
        if self._missing.get(key, float("-inf")) > self._now():
            raise not_found
        lookup = self._lookups.get(key)
        if lookup is None:
            if len(self._lookups) >= self.max_lookups:
                raise OrchestratorError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    f"too many stored-response lookups at once ({self.max_lookups}); retry soon",
                    param=param,
                )
            lookup = asyncio.ensure_future(self._look_for(key, table))
            self._lookups[key] = lookup
            lookup.add_done_callback(self._lookup_ended)
        try:
            found = await asyncio.shield(lookup)
        except _Unsure as error:
            raise OrchestratorError(
                ErrorCode.UNAVAILABLE,
                f"Response with id {response_id!r} could not be looked for everywhere: {error}; "
                "retry",
                param=param,
            ) from None
        if found is None:
            raise not_found
        self.remember(response_id, found)
        return found

    def _lookup_ended(self, lookup: asyncio.Future[Replica | None]) -> None:
        self._lookups = {k: v for k, v in self._lookups.items() if v is not lookup}
        if not lookup.cancelled():
            lookup.exception()  # retrieved: every waiter may have gone

    def _missing_for_now(self, key: _Key) -> None:
        missing = self._missing
        missing[key] = self._now() + MISSING_TTL_S
        missing.move_to_end(key)
        while len(missing) > MISSING_CAPACITY:
            missing.popitem(last=False)

    async def _look_for(self, key: _Key, table: RoutingTable) -> Replica | None:
        """The replica that answers 200 for `response_id`; None when all the candidates said
        they do not hold it; raises `_Unsure` when none did and some gave no answer."""
        response_id, model = key
        path = f"{RESPONSES_PATH}/{response_id}"
        deadline_s = self._now() + LOOKUP_TIMEOUT_S
        candidates = [r for r in table.replicas if model is None or r.model == model]
        asked = [r for r in candidates if r.state is not ReplicaState.UNHEALTHY]
        silent = [r.replica_id for r in candidates if r.state is ReplicaState.UNHEALTHY]

        async def holds(replica: Replica) -> Replica | None:
            try:
                reply = await self._passthrough.send(
                    replica, "GET", path, b"", deadline_s=deadline_s
                )
            except ReplicaUnreachable:
                silent.append(replica.replica_id)
                return None
            return replica if reply.status == 200 else None

        asks = [asyncio.create_task(holds(r)) for r in asked]
        try:
            for done in asyncio.as_completed(asks):
                found = await done
                if found is not None:
                    return found
        finally:
            for ask in asks:
                ask.cancel()
        if silent:
            raise _Unsure(f"replica {', '.join(sorted(silent)[:3])} did not answer")
        self._missing_for_now(key)
        return None


class _Unsure(Exception):
    """No replica answered that it holds a response, and one that may hold it did not answer."""
