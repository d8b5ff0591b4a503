"""A Prometheus server of our own: the installed binary, a temporary data directory, our rules and
a list of targets; started, queried over its HTTP API and stopped with nothing left behind.

Used by `orchestrator up --prometheus` and by the tests that check rules and dashboards against
what the real processes export.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import yaml

from orchestrator.monitoring.rules import render_rules
from orchestrator.monitoring.scrape_config import DiscoveredJob, ScrapeTarget, prometheus_config

PROMETHEUS_BINARY: Final = Path("/usr/bin/prometheus")
READY_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0
_PR_SET_PDEATHSIG: Final = 1


class PrometheusUnavailable(Exception):
    """The Prometheus binary is not installed where we look for it."""


class PrometheusError(Exception):
    """Prometheus did not start, or answered a query with an error."""


def prometheus_available(binary: Path = PROMETHEUS_BINARY) -> bool:
    return binary.is_file() and shutil.which(str(binary)) is not None


class LocalPrometheus:
    """One Prometheus process on loopback; use as a context manager or call `start`/`stop`.

    `rules` is the rule file's text (default: the shipped rules as they are); `port` 0 picks a
    free one. `discovered` jobs find their targets through HTTP service discovery. Intervals are
    wall-clock seconds. Call `start` from a thread that lives as long as the server should: the
    server is stopped when that thread or this process ends.
    """

    def __init__(
        self,
        targets: Sequence[ScrapeTarget],
        *,
        rules: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        scrape_interval_s: float = 1.0,
        evaluation_interval_s: float = 1.0,
        binary: Path = PROMETHEUS_BINARY,
        discovered: Sequence[DiscoveredJob] = (),
    ) -> None:
        if not prometheus_available(binary):
            raise PrometheusUnavailable(
                f"{binary} is not installed (Debian/Ubuntu: apt-get install prometheus)"
            )
        self._targets = list(targets)
        self._discovered = list(discovered)
        self._rules = render_rules() if rules is None else rules
        self._host = host
        self._port = port
        self._scrape_interval_s = scrape_interval_s
        self._evaluation_interval_s = evaluation_interval_s
        self._binary = binary
        self._workdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it is started."""
        return None if self._process is None else self._process.pid

    @property
    def log_path(self) -> Path | None:
        return None if self._workdir is None else self._workdir / "prometheus.log"

    def start(self) -> LocalPrometheus:
        """Write the config and rules to a temporary directory and start the server."""
        if self._process is not None:
            raise PrometheusError("already started")
        if self._port == 0:
            self._port = _free_port(self._host)
        self._workdir = Path(tempfile.mkdtemp(prefix="orchestrator-prometheus-"))
        rules_path = self._workdir / "rules.yaml"
        rules_path.write_text(self._rules)
        config = prometheus_config(
            self._targets,
            rule_files=[str(rules_path)],
            scrape_interval_s=self._scrape_interval_s,
            evaluation_interval_s=self._evaluation_interval_s,
            discovered=self._discovered,
        )
        config_path = self._workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        command = [
            str(self._binary),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={self._workdir / 'data'}",
            f"--web.listen-address={self._host}:{self._port}",
            "--log.level=warn",
        ]
        with (self._workdir / "prometheus.log").open("wb") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until `/-/ready` answers 200; raises `PrometheusError` with its log otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            process = self._running()
            if process.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited with status {process.returncode}: {self._log_tail()}"
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.1)
        raise PrometheusError(f"prometheus not ready within {timeout_s:g} s: {self._log_tail()}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result list (`metric` labels and `value` per series)."""
        data = self._api("query", {"query": expr})
        result = data["result"]
        if data.get("resultType") == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts, each with `labels`, `state` and `activeAt`."""
        return list(self._api("alerts", None)["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets with their `health` and `labels`."""
        return list(self._api("targets", {"state": "active"})["activeTargets"])

    def rule_groups(self) -> list[dict[str, Any]]:
        """Loaded rule groups with each rule's `health` and `lastError`."""
        return list(self._api("rules", None)["groups"])

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its data directory."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> LocalPrometheus:
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _api(self, path: str, params: dict[str, str] | None) -> dict[str, Any]:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
        except OSError as error:
            raise PrometheusError(f"{url}: {error}") from error
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        data: dict[str, Any] = body["data"]
        return data

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise PrometheusError("not started")
        return self._process

    def _log_tail(self) -> str:
        path = self.log_path
        return "" if path is None or not path.exists() else path.read_text()[-2000:]


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """Prometheus gets SIGTERM when the thread that started it ends, or its process dies even by
    SIGKILL (Linux ties PR_SET_PDEATHSIG to the forking thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
