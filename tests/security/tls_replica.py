"""A simulated replica serving HTTPS with our CA's server certificate and requiring a client
certificate from the same CA; shared by the router-to-replica and control-plane check tests."""

from __future__ import annotations

from aiohttp import web
from pki import Pki
from replica_server import ReplicaThread

from orchestrator.core.generations import Generation
from orchestrator.security.http_tls import server_context
from orchestrator.sim.replica import ReplicaSettings, build_app


class TlsReplicaThread(ReplicaThread):
    def __init__(self, pki: Pki) -> None:
        super().__init__(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=5))
        self._pki = pki

    async def _start(self) -> None:
        self.app = build_app(self.settings)
        self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        context = server_context(self._pki.server_files(mutual=True))
        await web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context).start()
        self.url = f"https://127.0.0.1:{self._runner.addresses[0][1]}"
