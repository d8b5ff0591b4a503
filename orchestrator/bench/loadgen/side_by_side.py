"""LoadGen's Server scenario through our router and through sglang-router, same replicas.

    python -m orchestrator.bench.loadgen.side_by_side [--fleet MI355X:1,MI300X:1]
        [--time-scale 1] [--qps 2,4,6] [--duration 20] [--max-output-tokens 256]

Starts simulated replica processes once, then, one router at a time on loopback: ours (the
`capacity` profile, HTTP) and `sglang-router` with `power_of_two` and with `round_robin`. For
each router it runs LoadGen's Server scenario at every `--qps` and reports the highest rate whose
p99 TTFT and p99 TPOT are within the (time-scaled) limits, with its tokens/s. The replicas
serve the model under a local tokenizer directory's path, so sglang-router never looks for a
tokenizer on a hub.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.bench.loadgen.report import Report
from orchestrator.bench.loadgen.run import LoadgenSettings, run_loadgen
from orchestrator.bench.peers import write_tokenizer
from orchestrator.bench.processes import child, free_port, wait_http
from orchestrator.bench.simulate.fleet_spec import FleetSpec, parse_fleet
from orchestrator.core.arg_types import non_negative_float, positive_floats, positive_int, seconds
from orchestrator.core.errors import OrchestratorError

ROUTERS = ("ours", "sglang-router power_of_two", "sglang-router round_robin")


@dataclass(frozen=True, slots=True)
class RouterRow:
    router: str
    best: Report | None  # the highest rate within the limits
    runs: list[Report]


@contextlib.contextmanager
def replicas(
    fleet: FleetSpec, model: str, time_scale: float, workdir: Path
) -> Iterator[list[tuple[str, str]]]:
    """(generation, url) per replica, each a `orchestrator sim serve` process."""
    with contextlib.ExitStack() as stack:
        out = []
        index = 0
        for pool in fleet.pools:
            for _ in range(pool.replicas):
                port = free_port()
                argv = [
                    sys.executable, "-m", "orchestrator", "sim", "serve", "--generation",
                    pool.generation.value, "--port", str(port), "--time-scale", str(time_scale),
                    "--served-model-name", model, "--seed", str(index),
                ]  # fmt: skip
                stack.enter_context(child(argv, workdir / f"replica-{index}.log"))
                out.append((pool.generation.value, f"http://127.0.0.1:{port}"))
                index += 1
        for _, url in out:
            wait_http(f"{url}/health", 60)
        yield out


def router_argv(
    name: str, backends: Sequence[tuple[str, str]], model: str, time_scale: float, port: int,
    workdir: Path,
) -> list[str]:  # fmt: skip
    if name == "ours":
        entries = "".join(
            f"  - {{id: r{i}-{g.lower()}, url: '{u}', pool: {g.lower()}, site: local, "
            f"generation: {g}, engine: sim, timeScale: {time_scale}}}\n"
            for i, (g, u) in enumerate(backends)
        )
        config = workdir / "replicas.yaml"
        config.write_text(
            f"apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: '{model}'\n"
            f"replicas:\n{entries}"
        )
        return [
            sys.executable, "-m", "orchestrator", "router", "--config", str(config),
            "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0",
            "--latency-scale", str(time_scale),
        ]  # fmt: skip
    policy = name.split()[-1]
    return [
        sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
        "--port", str(port), "--worker-urls", *(u for _, u in backends), "--policy", policy,
        "--log-level", "warn", "--prometheus-port", str(free_port()),
    ]  # fmt: skip


def measure_router(
    name: str,
    backends: Sequence[tuple[str, str]],
    model: str,
    rates: Sequence[float],
    args: argparse.Namespace,
    workdir: Path,
) -> RouterRow:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / f"{name.replace(' ', '-')}.log"
    runs: list[Report] = []
    best: Report | None = None
    argv = router_argv(name, backends, model, args.time_scale, port, workdir)
    with child(argv, log):
        try:
            wait_http(url + ("/ready" if name == "ours" else "/health"), 90)
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{name}'s log:\n{log.read_text()[-3000:]}") from None
        time.sleep(1.0)  # health checks mark every backend ready
        for rate in rates:
            print(f"{name}: LoadGen Server at {rate:g} q/s", file=sys.stderr, flush=True)
            settings = LoadgenSettings(
                endpoint=url, scenario="Server", target_qps=rate, duration_s=args.duration,
                time_scale=args.time_scale, samples=args.samples, seed=args.seed,
                max_output_tokens=args.max_output_tokens, model=model,
                out_dir=workdir / name.replace(" ", "-") / f"qps-{rate:g}",
            )  # fmt: skip
            report = run_loadgen(settings)
            runs.append(report)
            if report.within_limits and report.failed == 0:
                best = report
    return RouterRow(name, best, runs)


def format_rows(rows: Sequence[RouterRow], time_scale: float) -> str:
    header = (
        f"{'router':<28}{'best q/s':>9}{'tokens/s':>11}{'×scale':>11}{'p99 TTFT s':>12}"
        f"{'p99 TPOT ms':>13}{'LoadGen':>9}"
    )
    lines = [f"LoadGen Server through each router, same replicas, time scale {time_scale:g}",
             header, "-" * len(header)]  # fmt: skip
    for row in rows:
        r = row.best
        if r is None:
            lines.append(f"{row.router:<28}{'none within the limits':>40}")
            continue
        qps = r.summary.get("Scheduled samples per second", "?")
        lines.append(
            f"{row.router:<28}{qps:>9}{r.tokens_per_s:>11,.1f}{r.tokens_per_s_unscaled:>11,.0f}"
            f"{r.ttft_p99_s:>12.3f}{r.tpot_p99_s * 1e3:>13.1f}{r.result:>9}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--fleet", default="MI355X:1,MI300X:1")
    parser.add_argument("--time-scale", type=non_negative_float, default=1.0)
    parser.add_argument(
        "--qps",
        type=positive_floats,
        default=(2.0, 4.0, 6.0),
        help="comma-separated Server rates to try",
    )
    parser.add_argument("--duration", type=seconds, default=20.0, help="seconds per LoadGen run")
    parser.add_argument("--samples", type=positive_int, default=256)
    parser.add_argument("--max-output-tokens", type=positive_int, default=256)
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        fleet = parse_fleet(args.fleet)
        rates = sorted(args.qps)
    except (OrchestratorError, ValueError) as error:
        parser.error(str(getattr(error, "message", error)))
    names = [n.strip() for n in args.routers.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROUTERS]
    if unknown or not rates or rates[0] <= 0 or args.time_scale <= 0:
        parser.error(f"--routers from {', '.join(ROUTERS)}; --qps and --time-scale > 0")
    with tempfile.TemporaryDirectory(prefix="loadgen-side-") as folder:
        workdir = Path(folder)
        model = write_tokenizer(workdir / "gpt-oss-120b")
        with replicas(fleet, model, args.time_scale, workdir) as backends:
            rows = [measure_router(n, backends, model, rates, args, workdir) for n in names]
    print(format_rows(rows, args.time_scale))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
