"""The embedded stack's router: a child process following the control plane's table."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Final

from orchestrator.config.flags import to_flags
from orchestrator.config.schema import OrchestratorConfig
from orchestrator.up.banner import Endpoints

ROUTER_STOP_TIMEOUT_S: Final = 10.0
_PR_SET_PDEATHSIG: Final = 1


@contextlib.contextmanager
def running_router(
    config: OrchestratorConfig, endpoints: Endpoints, progress: Callable[[str], None]
) -> Iterator[subprocess.Popen[bytes]]:
    """The router as a child process that dies with this one (`PR_SET_PDEATHSIG`), in a session
    of its own so a terminal's Ctrl-C reaches only `up`, which then stops it in order (SIGTERM,
    SIGKILL after `ROUTER_STOP_TIMEOUT_S`)."""
    command = [
        sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router",
        "--control-plane", endpoints.control_plane,
        "--host", endpoints.host,
        "--port", str(endpoints.http_port),
        "--grpc-port", str(endpoints.grpc_port),
        "--metrics-port", str(endpoints.metrics_port),  # on loopback (the default host)
        "--profile", config.router.profile,
        "--latency-scale", str(config.router.latency_scale or 1.0),
        *config.router.admission.router_flags(),
        *config.router.attempts.router_flags(),
        *config.router.slo.router_flags(),
        *to_flags(config.router.breaker),
        *to_flags(config.router.upstream),
        *to_flags(config.router.http),
        *to_flags(config.router.grpc),
        *to_flags(config.router.timing),
    ]  # fmt: skip
    router = subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_parent)
    progress(f"router starting on http://{endpoints.host}:{endpoints.http_port} (pid {router.pid})")
    try:
        yield router
    finally:
        progress("stopping the router")
        _stop(router)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop(router: subprocess.Popen[bytes]) -> None:
    if router.poll() is None:
        router.terminate()
    try:
        router.wait(ROUTER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        router.kill()
        router.wait()
