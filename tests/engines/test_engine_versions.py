"""Each engine states its version on a page of its own; the control plane reads it at register."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from orchestrator import __version__
from orchestrator.controlplane.engine_version import read_engine_version
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind
from orchestrator.engines import ExternalAdapter, adapter_for
from orchestrator.sim.replica import ReplicaSettings, running_replica


@pytest.mark.parametrize(
    ("kind", "path", "page"),
    [
        (EngineKind.VLLM, "/version", {"version": "0.10.1"}),
        # SGLang states it among its server arguments.
        (EngineKind.SGLANG, "/get_server_info", {"tp_size": 1, "version": "0.10.1"}),
        (EngineKind.EXTERNAL, "/version", {"version": "0.10.1"}),
    ],
)
def test_each_adapter_reads_the_version_from_its_engines_page(
    kind: EngineKind, path: str, page: dict[str, object]
) -> None:
    adapter = adapter_for(kind)

    assert adapter.version_path == path
    assert adapter.parse_version(json.dumps(page)) == "0.10.1"


@pytest.mark.parametrize("body", ["<html>", "[]", '{"version": 3}', '{"other": "x"}'])
def test_a_page_that_states_no_version_is_a_clear_error(body: str) -> None:
    with pytest.raises(ValueError, match="version page"):
        adapter_for("vllm").parse_version(body)


def test_a_simulated_replica_states_its_version_and_a_silent_engine_registers_with_none() -> None:
    async def scenario() -> tuple[str, str]:
        settings = ReplicaSettings(Generation.MI300X, time_scale=0.0)
        async with (
            running_replica(settings) as url,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session,
        ):
            stated = await read_engine_version(session, url, adapter_for("sim"))
            # A page that is not there: no version, no exception.
            nowhere = ExternalAdapter(version_path="/no-such-page")
            silent = await read_engine_version(session, url, nowhere)
            return stated, silent

    assert asyncio.run(scenario()) == (__version__, "")
