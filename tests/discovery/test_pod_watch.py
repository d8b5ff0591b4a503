"""`PodWatch` against a local API server: pods join and leave through watch events, not polls;
an expired version (410 Gone, as an event or a status) relists; a finished watch resumes from the
last version; `stop()` ends it promptly."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fake_apiserver import FakeApiServer, running_apiserver
from kubernetes import client

from orchestrator.discovery import (
    PodEndpoint,
    PodWatch,
    kubernetes_api,
    own_namespace,
    ready_endpoint,
    selector_string,
)

SELECTOR = {"app.kubernetes.io/name": "vllm", "orchestrator.io/pool": "us-vllm"}
OTHER = {"app.kubernetes.io/name": "sglang"}
PORT = 8000
WAIT_S = 10.0


def core_api(server: FakeApiServer) -> Any:
    configuration = client.Configuration()
    configuration.host = server.url
    return client.CoreV1Api(client.ApiClient(configuration))


class Seen:
    """Every endpoint set the watch published, in order, for the test thread to wait on."""

    def __init__(self) -> None:
        self.sets: queue.Queue[dict[str, str]] = queue.Queue()

    def __call__(self, endpoints: Mapping[str, PodEndpoint]) -> None:
        self.sets.put({name: endpoint.url for name, endpoint in endpoints.items()})

    def next(self) -> dict[str, str]:
        return self.sets.get(timeout=WAIT_S)

    def until(self, expected: dict[str, str]) -> None:
        deadline = time.monotonic() + WAIT_S
        last: dict[str, str] | None = None
        while time.monotonic() < deadline:
            try:
                last = self.sets.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if last == expected:
                return
        raise AssertionError(f"never published {expected}; last published {last}")


@contextmanager
def watching(
    server: FakeApiServer, *, watch_timeout_s: int = 300, retry_s: float = 0.2
) -> Iterator[tuple[PodWatch, Seen]]:
    seen = Seen()
    pod_watch = PodWatch(
        core_api(server),
        namespace="llm",
        selector=SELECTOR,
        port=PORT,
        on_change=seen,
        watch_timeout_s=watch_timeout_s,
        retry_s=retry_s,
    )
    thread = threading.Thread(target=pod_watch.run, daemon=True)
    thread.start()
    try:
        yield pod_watch, seen
    finally:
        pod_watch.stop()
        thread.join(timeout=WAIT_S)
        assert not thread.is_alive(), "PodWatch.run did not end after stop()"


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def url(ip: str) -> str:
    return f"http://{ip}:{PORT}"


def test_pods_join_and_leave_through_watch_events_with_a_single_list() -> None:
    with running_apiserver() as server:
        server.add_pod("vllm-0", SELECTOR, "10.0.0.1")
        server.add_pod("sglang-0", OTHER, "10.0.0.9")
        with watching(server) as (_, seen):
            assert seen.next() == {"vllm-0": url("10.0.0.1")}
            server.add_pod("vllm-1", SELECTOR, "10.0.0.2")
            assert seen.next() == {"vllm-0": url("10.0.0.1"), "vllm-1": url("10.0.0.2")}
            server.set_ready("vllm-0", False)
            assert seen.next() == {"vllm-1": url("10.0.0.2")}
            server.set_ready("vllm-0", True)
            assert seen.next() == {"vllm-0": url("10.0.0.1"), "vllm-1": url("10.0.0.2")}
            server.delete_pod("vllm-1")
            assert seen.next() == {"vllm-0": url("10.0.0.1")}
            server.add_pod("sglang-1", OTHER, "10.0.0.10")  # another selector: no change
            server.add_pod("vllm-2", SELECTOR, "10.0.0.3", ready=False)  # not ready: no change
            server.set_ready("vllm-2", True)
            assert seen.next() == {"vllm-0": url("10.0.0.1"), "vllm-2": url("10.0.0.3")}
        lists, watches = server.lists(), server.watches()
        assert len(lists) == 1, "changes must come from the watch, not from listing again"
        assert lists[0].selector == selector_string(SELECTOR)
        assert watches[0].resource_version == "102", "the watch starts at the list's version"


def test_a_410_gone_event_makes_it_list_again_and_catch_up() -> None:
    with running_apiserver(gone_as="event") as server:
        server.add_pod("vllm-0", SELECTOR, "10.0.0.1")
        with watching(server) as (_, seen):
            assert seen.next() == {"vllm-0": url("10.0.0.1")}
            wait_for(lambda: server.open_watches() == 1, "the watch to open")
            server.compact()
            server.end_watches(gone=True)
            server.add_pod("vllm-1", SELECTOR, "10.0.0.2")  # only a new list can show it now
            seen.until({"vllm-0": url("10.0.0.1"), "vllm-1": url("10.0.0.2")})
        assert len(server.lists()) == 2


def test_a_410_gone_status_on_resuming_makes_it_list_again() -> None:
    with running_apiserver(gone_as="status") as server:
        server.add_pod("vllm-0", SELECTOR, "10.0.0.1")
        with watching(server) as (_, seen):
            assert seen.next() == {"vllm-0": url("10.0.0.1")}
            wait_for(lambda: server.open_watches() == 1, "the watch to open")
            # Other pods move the server's version past the watch's last one; then the history
            # is compacted and the watch ends, so resuming from its version is too old.
            server.add_pod("sglang-0", OTHER, "10.0.0.9")
            server.compact()
            server.end_watches()
            wait_for(lambda: len(server.lists()) == 2, "a second list after 410 Gone")
            server.delete_pod("vllm-0")
            server.add_pod("vllm-1", SELECTOR, "10.0.0.2")
            seen.until({"vllm-1": url("10.0.0.2")})
        assert len(server.lists()) == 2


def test_a_watch_that_ends_resumes_from_the_last_version_seen_without_listing() -> None:
    with running_apiserver() as server:
        server.add_pod("vllm-0", SELECTOR, "10.0.0.1")
        with watching(server) as (_, seen):
            assert seen.next() == {"vllm-0": url("10.0.0.1")}
            wait_for(lambda: server.open_watches() == 1, "the watch to open")
            server.add_pod("vllm-1", SELECTOR, "10.0.0.2")
            assert seen.next() == {"vllm-0": url("10.0.0.1"), "vllm-1": url("10.0.0.2")}
            server.end_watches()  # as at timeoutSeconds
            wait_for(lambda: len(server.watches()) == 2, "the watch to resume")
            server.delete_pod("vllm-0")
            assert seen.next() == {"vllm-1": url("10.0.0.2")}
        assert len(server.lists()) == 1
        assert [w.resource_version for w in server.watches()] == ["101", "102"]


def test_stop_ends_an_idle_watch_promptly() -> None:
    with running_apiserver() as server:
        server.add_pod("vllm-0", SELECTOR, "10.0.0.1")
        with watching(server) as (pod_watch, seen):
            assert seen.next() == {"vllm-0": url("10.0.0.1")}
            wait_for(lambda: server.open_watches() == 1, "the watch to open")
            started = time.monotonic()
        # `watching` joined the thread on exit: stop() closed the idle watch.
        assert time.monotonic() - started < 5.0
        assert pod_watch.lists == 1


def test_an_unreachable_api_server_is_retried_and_stop_still_ends_the_watch() -> None:
    with running_apiserver() as server:
        address = server.url
    # The server is gone: the watch keeps retrying (logging), and stop() still ends it.
    dead = FakeApiServer(url=address)
    with watching(dead, retry_s=0.05) as (pod_watch, seen):
        time.sleep(0.3)
        assert seen.sets.empty()
    assert pod_watch.lists == 0


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(
            {
                "metadata": {"name": "a"},
                "status": {
                    "phase": "Running",
                    "podIP": "10.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            "http://10.0.0.1:8000",
            id="running-and-ready",
        ),
        pytest.param(
            {
                "metadata": {"name": "a"},
                "status": {
                    "phase": "Running",
                    "podIP": "fd00::1",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            "http://[fd00::1]:8000",
            id="ipv6",
        ),
        pytest.param(
            {
                "metadata": {"name": "a"},
                "status": {
                    "phase": "Running",
                    "podIP": "10.0.0.1",
                    "conditions": [{"type": "Ready", "status": "False"}],
                },
            },
            None,
            id="unready",
        ),
        pytest.param(
            {
                "metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                "status": {
                    "phase": "Running",
                    "podIP": "10.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            None,
            id="terminating",
        ),
        pytest.param(
            {"metadata": {"name": "a"}, "status": {"phase": "Pending"}}, None, id="pending-no-ip"
        ),
        pytest.param(
            {
                "metadata": {"name": "a"},
                "status": {
                    "phase": "Succeeded",
                    "podIP": "10.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            None,
            id="finished",
        ),
    ],
)
def test_only_running_ready_pods_with_an_ip_serve(
    pod: dict[str, Any], expected: str | None
) -> None:
    endpoint = ready_endpoint(pod, PORT)
    assert (endpoint.url if endpoint else None) == expected


def test_outside_a_pod_the_api_comes_from_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_apiserver() as server:
        server.add_pod("vllm-0", SELECTOR, "10.0.0.1")
        kubeconfig = tmp_path / "config"
        kubeconfig.write_text(
            f"""
apiVersion: v1
kind: Config
clusters: [{{name: local, cluster: {{server: "{server.url}"}}}}]
users: [{{name: me, user: {{token: not-checked}}}}]
contexts: [{{name: local, context: {{cluster: local, user: me, namespace: llm}}}}]
current-context: local
"""
        )
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.setenv("POD_NAMESPACE", "llm")
        api = kubernetes_api()
        pods = api.list_namespaced_pod(own_namespace(), label_selector=selector_string(SELECTOR))
        assert [pod.metadata.name for pod in pods.items] == ["vllm-0"]
