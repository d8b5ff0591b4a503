"""Asking an engine which version it runs, once, when its replica registers.

The answer labels the replica's learned capacity, so an upgrade shows as a step in capacity per
software version. An engine that does not say (an older build, a page that moved) registers with
an empty version: the replica serves all the same, and the reason is logged once.
"""

from __future__ import annotations

import logging

import aiohttp

from orchestrator.engines import EngineAdapter

log = logging.getLogger(__name__)


async def read_engine_version(
    session: aiohttp.ClientSession, url: str, adapter: EngineAdapter
) -> str:
    """The version the engine at `url` states on its adapter's version page; "" when it states
    none or does not answer."""
    try:
        async with session.get(url + adapter.version_path) as response:
            response.raise_for_status()
            return adapter.parse_version(await response.text())
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.info("engine at %s states no version on %s: %s", url, adapter.version_path, exc)
        return ""
