"""LoadGen through our router, over HTTP and over gRPC, against simulated replica processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_stack import Stack, live_stack

from orchestrator.bench.loadgen.dataset import Dataset
from orchestrator.bench.loadgen.report import parse_summary, summary_number
from orchestrator.cli import main
from orchestrator.core.generations import Generation

TIME_SCALE = 1.0  # real time: short outputs keep each query well under a second


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("loadgen-stack")
    with live_stack([Generation.MI355X, Generation.MI300X], workdir, time_scale=TIME_SCALE) as s:
        yield s


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_loadgen_server_scenario_yields_a_summary_with_tokens_and_latencies(
    stack: Stack, transport: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = stack.http_url if transport == "http" else stack.grpc_target
    out = tmp_path / transport
    code = main([
        "bench", "loadgen", "--endpoint", endpoint, "--scenario", "Server", "--target-qps", "4",
        "--duration", "5", "--transport", transport, "--time-scale", str(TIME_SCALE),
        "--samples", "64", "--max-output-tokens", "48", "--out", str(out),
    ])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    summary = parse_summary((out / "mlperf_log_summary.txt").read_text())
    assert summary["Scenario"] == "Server"
    assert (summary_number(summary, r"tokens per second") or 0) > 0
    assert (summary_number(summary, r"99\.00 percentile first token latency") or 0) > 0
    report = json.loads((out / "report.json").read_text())
    assert report["queries"] >= 15 and report["failed"] == 0
    assert report["tokens_per_s"] > 0
    assert 0 < report["ttft_p50_s"] <= report["ttft_p99_s"]
    assert 0 < report["tpot_p50_s"] <= report["tpot_p99_s"]
    assert report["result"] in ("VALID", "INVALID")
    shares = report["pool_shares"]  # light load: the MI355X may take it all
    assert shares and sum(shares.values()) == pytest.approx(1.0)
    assert set(shares) <= {"r0-mi355x", "r1-mi300x", "mi355x", "mi300x"}
    assert (out / "report.png").stat().st_size > 0
    assert "[" in printed.err and "done" in printed.err  # the progress bar


def test_dataset_is_deterministic_per_seed_and_matches_the_workload_means() -> None:
    first = Dataset.synthetic(4000, seed=3)
    assert first == Dataset.synthetic(4000, seed=3)
    assert first != Dataset.synthetic(4000, seed=4)
    assert first.mean_input_tokens() == pytest.approx(5000, rel=0.05)
    assert first.mean_output_tokens() == pytest.approx(1278, rel=0.06)
    assert max(s.input_tokens for s in first.samples) <= 15330
    assert max(s.output_tokens for s in first.samples) <= 10240


def test_prompt_text_counts_as_the_sample_s_input_tokens() -> None:
    from orchestrator.sim.text import chat_prompt_tokens

    for sample in Dataset.synthetic(20, seed=1).samples:
        assert chat_prompt_tokens([sample.prompt()]) == sample.input_tokens


@pytest.mark.parametrize(
    "argv",
    [
        ["--scenario", "Server"],  # no endpoint
        ["--endpoint", "http://127.0.0.1:1", "--scenario", "Burst"],
        ["--endpoint", "http://127.0.0.1:1", "--scenario", "Server", "--target-qps", "0"],
        ["--endpoint", "http://127.0.0.1:1", "--scenario", "Server", "--transport", "udp"],
    ],
)
def test_loadgen_command_rejects_bad_arguments(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "loadgen", *argv])
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.slow
def test_side_by_side_runs_loadgen_through_ours_and_sglang_router_on_the_same_replicas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from orchestrator.bench.loadgen import side_by_side

    code = side_by_side.main([
        "--fleet", "MI355X:1,MI300X:1", "--qps", "3", "--duration", "4", "--samples", "32",
        "--max-output-tokens", "32", "--routers", "ours,sglang-router power_of_two",
    ])  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    rows = {line.split("  ")[0].strip(): line for line in table.splitlines()[3:]}
    assert set(rows) == {"ours", "sglang-router power_of_two"}
    for line in rows.values():
        tokens_per_s = float(line[37:48].replace(",", ""))
        assert tokens_per_s > 0, table


def test_loadgen_against_a_closed_port_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from live_fleet import free_port

    code = main([
        "bench", "loadgen", "--endpoint", f"http://127.0.0.1:{free_port()}", "--scenario",
        "Server", "--target-qps", "2", "--duration", "1", "--out", str(tmp_path),
    ])  # fmt: skip
    assert code == 1
    assert "first error: ClientConnectorError" in capsys.readouterr().out


@pytest.mark.slow
def test_loadgen_offline_scenario_completes_every_issued_sample(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "bench", "loadgen", "--endpoint", stack.http_url, "--scenario", "Offline",
        "--target-qps", "8", "--duration", "2", "--samples", "24", "--max-output-tokens", "32",
        "--max-in-flight", "8", "--out", str(tmp_path),
    ])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    summary = parse_summary((tmp_path / "mlperf_log_summary.txt").read_text())
    assert summary["Scenario"] == "Offline"
    assert (summary_number(summary, r"tokens per second") or 0) > 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["queries"] >= 16 and report["failed"] == 0
