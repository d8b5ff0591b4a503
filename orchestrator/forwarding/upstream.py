"""The router's one HTTP client to the replicas: a pooled, keep-alive `aiohttp.ClientSession`.

One pool per router process, opened at start and shared by every request, the scraper and the
health checks, so a request never pays for a new session or (usually) a new TCP connection.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """Connection-pool limits.

    `limit` caps open connections to all replicas together and `limit_per_host` to one replica;
    a request over the cap waits for a free connection (within its deadline). `keepalive_s` is how
    long an idle connection is kept: below the 5 s that vLLM's uvicorn keeps one, so the router
    closes idle connections before the replica does and rarely reuses a half-closed one.
    """

    limit: int = 4096
    limit_per_host: int = 1024
    keepalive_s: float = 4.0


class UpstreamPool:
    """Owns the session; `start()` inside the router's event loop, `close()` when it stops."""

    def __init__(self, settings: UpstreamSettings | None = None) -> None:
        self.settings = settings or UpstreamSettings()
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is not None:
            return
        connector = aiohttp.TCPConnector(
            limit=self.settings.limit,
            limit_per_host=self.settings.limit_per_host,
            keepalive_timeout=self.settings.keepalive_s,
            ttl_dns_cache=300,
        )
        # Bytes are relayed as the replica sent them: no decompression, no compression asked for,
        # no cookies kept between unrelated clients' requests.
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding",),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the upstream pool is not started; call start() first")
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
