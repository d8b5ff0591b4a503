"""Reading an engine's `/metrics` page over aiohttp, as the control plane scrapes it: capped, so a
replica that sends a page without end costs the scraper `MAX_PAGE_BYTES` at most; and how old a
load read from one is when it is sent on (`read_age_s`)."""

from __future__ import annotations

import time

import aiohttp

from orchestrator.core.records import ReplicaLoad
from orchestrator.engines.errors import MalformedMetricsPageError
from orchestrator.engines.metrics import MAX_PAGE_BYTES

_PIECE_BYTES = 64 * 1024


async def read_page(response: aiohttp.ClientResponse, limit: int = MAX_PAGE_BYTES) -> str:
    """The page's text; raises `MalformedMetricsPageError` (a ValueError) past `limit` bytes,
    before reading any of it when its length says so."""
    length = response.content_length
    if length is not None and length > limit:
        raise MalformedMetricsPageError(f"the page is over {limit} bytes")
    pieces: list[bytes] = []
    size = 0
    async for piece in response.content.iter_chunked(_PIECE_BYTES):
        size += len(piece)
        if size > limit:
            raise MalformedMetricsPageError(f"the page is over {limit} bytes")
        pieces.append(piece)
    return b"".join(pieces).decode("utf-8", errors="replace")


def read_age_s(load: ReplicaLoad | None, read_at_s: float) -> float:
    """How long ago this process read `load` (0 for none), `read_at_s` being `time.monotonic()`
    then: sent with each heartbeat, so the registry dates the load from its scrape. Monotonic, so
    a wall-clock step between the read and the send (NTP) neither ages the load nor freshens it."""
    return 0.0 if load is None else max(0.0, time.monotonic() - read_at_s)
