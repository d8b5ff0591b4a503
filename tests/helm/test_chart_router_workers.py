"""The chart runs as many router workers per pod as its CPU request holds whole CPUs (at least
one), or `router.workers` when set; the router's own CLI accepts the resulting command line, with
the control plane and with TLS."""

from __future__ import annotations

from typing import Any

import pytest
from chart import render
from test_chart_tls import parsed, pod_spec


def router_args(values: dict[str, Any]) -> Any:
    return parsed(pod_spec(render(values), "router")["containers"][0])


@pytest.mark.parametrize(
    ("cpu", "workers"), [("500m", 1), ("1", 1), ("1500m", 1), ("2", 2), ("2500m", 2), ("4", 4)]
)
def test_workers_follow_the_cpu_request_in_whole_cpus(cpu: str, workers: int) -> None:
    args = router_args({"router": {"resources": {"requests": {"cpu": cpu}}}})
    assert args.workers == workers
    assert args.control_plane is not None


def test_workers_set_explicitly_win_and_tls_keeps_them() -> None:
    args = router_args({"router": {"workers": 3, "tls": {"existingSecret": "router-tls"}}})
    assert args.workers == 3 and args.tls_cert is not None


def test_no_cpu_request_means_one_worker() -> None:
    assert router_args({"router": {"resources": {}}}).workers == 1
