"""Regenerate docs/benchmarks.md and its plots from fresh runs.

    python -m orchestrator.bench.report [--docs docs] [--reuse] [--skip-live]

Runs, in this process: the heterogeneous-efficiency comparison (Offline and Server, fleet
MI355X:16 + MI300X:16, prior all-equal, four profiles, each pool alone too), the scale benchmark
(efficiency 8 → 512 replicas, the timed 512-replica run, decision cost) and the live side by side
(LoadGen Server through our router and sglang-router over simulated replica processes). Raw
results are kept in `<docs>/img/data/*.json`; `--reuse` reads those instead of running again
(to redraw after editing the text) and `--only` runs some sections (say, in two processes), so
every figure still comes from the commands named in the page. Wall and CPU seconds are
recorded: the machine may be shared.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.bench.loadgen import side_by_side
from orchestrator.bench.simulate import scale
from orchestrator.bench.simulate.command import evaluate
from orchestrator.bench.simulate.efficiency import Efficiency
from orchestrator.bench.simulate.fleet_spec import COMPARED_PROFILES, Prior, parse_fleet
from orchestrator.bench.simulate.scenarios import ServerSearch
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures

FLEET = "MI355X:16,MI300X:16"
SIMULATE = (
    "orchestrator simulate --fleet MI355X:16,MI300X:16 --scenario {scenario} --prior equal "
    "--compare --sum-of-parts{minutes}"
)
SCALE = "python -m orchestrator.bench.simulate.scale --efficiency-minutes 1 --no-timed --json"
TIMED = "python -m orchestrator.bench.simulate.scale --sizes 8 --efficiency-minutes 1 --json"
SIDE = (
    "python -m orchestrator.bench.loadgen.side_by_side --fleet MI355X:1,MI300X:1 "
    "--qps 2,4,8 --duration 20 --max-output-tokens 128"
)


def _efficiency_data(results: Sequence[Efficiency]) -> list[dict[str, Any]]:
    out = []
    for r in results:
        probes = []
        if isinstance(r.fleet.detail, ServerSearch):
            probes = [
                {
                    "rate_per_s": p.rate_per_s, "offered_tokens_per_s": p.tokens_per_s,
                    "delivered_tokens_per_s": p.delivered_tokens_per_s, "passed": p.passed,
                    "ttft_p99_s": p.ttft_p99_s, "tpot_p99_s": p.tpot_p99_s,
                }
                for p in r.fleet.detail.probes
            ]  # fmt: skip
        out.append({
            "profile": r.profile, "scenario": r.scenario,
            "fleet_tokens_per_s": r.fleet.tokens_per_s, "pool_shares": r.fleet.pool_shares,
            "parts": {p.label: p.tokens_per_s for p in r.parts},
            "sum_of_parts": r.sum_of_parts, "efficiency": r.ratio, "probes": probes,
        })  # fmt: skip
    return out


def _timed(name: str, run: Callable[[], Any]) -> dict[str, Any]:
    print(f"== {name}", file=sys.stderr, flush=True)
    cpu, wall = time.process_time(), time.perf_counter()
    data = run()
    return {"data": data, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


def collect(
    data_dir: Path, reuse: bool, skip_live: bool, only: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    fleet = parse_fleet(FLEET)

    def efficiency(scenario: str) -> Callable[[], Any]:
        minutes = None if scenario == "Offline" else 3.0
        return lambda: _efficiency_data(
            evaluate(
                fleet, scenario, list(COMPARED_PROFILES), Prior.EQUAL, sum_of_parts=True,
                minutes=minutes, warmup_s=120.0, seed=0,
            )
        )  # fmt: skip

    jobs = {scenario: efficiency(scenario) for scenario in ("Offline", "Server")}
    jobs["scale"] = lambda: _run_main(scale.main, SCALE.split()[3:])
    jobs["timed"] = lambda: _run_main(scale.main, TIMED.split()[3:])
    if not skip_live:
        jobs["live"] = lambda: _run_main(side_by_side.main, SIDE.split()[3:], text=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, job in jobs.items():
        path = data_dir / f"{name}.json"
        if only is not None and name not in only:
            if path.exists():
                out[name] = json.loads(path.read_text())
            continue
        if reuse and path.exists():
            out[name] = json.loads(path.read_text())
            continue
        out[name] = _timed(name, job)
        path.write_text(json.dumps(out[name], indent=1))
    return out


def _run_main(main: Callable[[list[str]], int], argv: list[str], *, text: bool = False) -> Any:
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"{argv} exited {code}")
    return captured.getvalue() if text else json.loads(captured.getvalue())


def _plots(results: dict[str, dict[str, Any]], img: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    server = results["Server"]["data"]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for row in server:
        probes = sorted(row["probes"], key=lambda p: p["offered_tokens_per_s"])
        xs = [p["offered_tokens_per_s"] / 1e3 for p in probes]
        line = axes[0].plot(xs, [p["delivered_tokens_per_s"] / 1e3 for p in probes], "-",
                            label=row["profile"])[0]  # fmt: skip
        for p, x in zip(probes, xs, strict=True):
            axes[0].plot(x, p["delivered_tokens_per_s"] / 1e3, "o", color=line.get_color(),
                         fillstyle="full" if p["passed"] else "none")  # fmt: skip
        axes[1].plot(xs, [min(p["ttft_p99_s"], 30.0) for p in probes], "o-", label=row["profile"])
    axes[0].set_xlabel("offered output tokens/s (×1000)")
    axes[0].set_ylabel("delivered tokens/s (×1000)")
    axes[0].set_title("Server: filled = within p99 limits")
    axes[0].legend()
    axes[1].axhline(3.0, color="#cc3311", linestyle="--", label="p99 TTFT limit")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("offered output tokens/s (×1000)")
    axes[1].set_ylabel("p99 TTFT, s (capped at 30)")
    axes[1].legend()
    figure.tight_layout()
    figure.savefig(img / "bench-server-rate.png", dpi=90)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(8, 3.6))
    profiles = [row["profile"] for row in server]
    width = 0.38
    for offset, scenario in ((-width / 2, "Offline"), (width / 2, "Server")):
        shares = [r["pool_shares"].get("local-mi355x", 0.0) for r in results[scenario]["data"]]
        axis.bar([i + offset for i in range(len(profiles))], shares, width, label=scenario)
    figures = load_figures()
    fast = capacity_prior_tokens_per_s(figures, parse_fleet("MI355X:1").pools[0].generation)
    slow = capacity_prior_tokens_per_s(figures, parse_fleet("MI300X:1").pools[0].generation)
    axis.axhline(fast / (fast + slow), color="#cc3311", linestyle="--",
                 label="MI355X share of the summed capacity")  # fmt: skip
    axis.set_xticks(range(len(profiles)), profiles)
    axis.set_ylabel("MI355X pool's share of output tokens")
    axis.set_ylim(0, 1)
    axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(img / "bench-pool-share.png", dpi=90)
    plt.close(figure)

    points = results["scale"]["data"]["points"]
    figure, axis = plt.subplots(figsize=(7, 3.6))
    axis.plot([p["replicas"] for p in points], [100 * p["efficiency"] for p in points], "o-")
    axis.set_xscale("log", base=2)
    axis.set_xticks([p["replicas"] for p in points], [str(p["replicas"]) for p in points])
    axis.set_ylim(80, 110)
    axis.set_xlabel("MI355X replicas")
    axis.set_ylabel("scale efficiency, % of linear from 8")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(img / "bench-scale.png", dpi=90)
    plt.close(figure)


def _efficiency_table(rows: Sequence[dict[str, Any]]) -> str:
    parts = list(rows[0]["parts"])
    head = ["profile", "fleet tok/s", *(f"{p} alone" for p in parts), "sum of parts",
            "efficiency", "MI355X share"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"`{r['profile']}`", f"{r['fleet_tokens_per_s']:,.0f}",
                 *(f"{r['parts'][p]:,.0f}" for p in parts), f"{r['sum_of_parts']:,.0f}",
                 f"**{r['efficiency']:.1%}**",
                 f"{r['pool_shares'].get('local-mi355x', 0):.1%}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cost(entry: dict[str, Any]) -> str:
    return f"{entry['wall_s']:.0f} s wall, {entry['cpu_s']:.0f} s CPU"


def render(results: dict[str, dict[str, Any]]) -> str:
    scale_data = results["scale"]["data"]
    timed = results["timed"]["data"]["timed"]
    decision = {int(k): v for k, v in results["timed"]["data"]["decision_us"].items()}
    small, large = min(decision), max(decision)
    size_rows = "\n".join(
        f"| {p['replicas']} | {p['rate_per_s']:,.1f} | {p['tokens_per_s']:,.0f} | "
        f"{p['efficiency']:.1%} |"
        for p in scale_data["points"]
    )
    live = results.get("live")
    live_text = (
        "```\n" + live["data"].strip() + "\n```\n\n(" + _cost(live) + ")"
        if live
        else "_Not run in this regeneration (`--skip-live`)._"
    )
    return f"""# Benchmarks

Every figure on this page comes from the commands named beside it; the whole page, its data
(`docs/img/data/*.json`) and its plots (`docs/img/bench-*.png`) are regenerated by

    python -m orchestrator.bench.report

The simulated results run in **virtual time** (no sockets, no sleeping): the router's real
routing profiles, plugins and online capacity estimator decide for every request, and every
replica is the simulated engine on the fleet model (`docs/fleet-model.md`). Latency limits are
MLPerf's Server limits for gpt-oss-120b: p99 TTFT ≤ 3 s, p99 TPOT ≤ 80 ms. The workload has the
MLPerf set's length statistics (mean input ~5,000, mean output ~1,278 tokens, capped at the
maxima). Wall times are from a shared 2-core machine; CPU seconds of this process are given too.

## Heterogeneous efficiency: one endpoint over MI355X and MI300X

Fleet MI355X:16 + MI300X:16 with the capacity prior deliberately wrong (`--prior equal`: every
replica starts with the same capacity, the fleet's mean), so the estimator has to learn the
4.5 : 1 ratio from scrapes. Efficiency = fleet tokens/s ÷ (MI355X:16 alone + MI300X:16 alone),
each pool alone with the same profile and the same (wrong) priors.

### Offline

`{SIMULATE.format(scenario="Offline", minutes="")}` ({_cost(results["Offline"])})

Each run gets a sample set sized to ten simulated minutes of its own work; the harness keeps the
replicas' sequence limits (summed) in flight, opening that window over the first minute, longest
outputs first.

{_efficiency_table(results["Offline"]["data"])}

### Server

`{SIMULATE.format(scenario="Server", minutes=" --minutes 3")}` ({_cost(results["Server"])})

The highest Poisson rate whose measured requests (3 simulated minutes after a 2-minute warm-up
at the same rate) meet both p99 limits, found by bracketing and bisecting to 1 %. Every probe
replays the same seeded requests (common random numbers).

**Caveat: these windows are short of steady state.** With outputs of up to 10,240 tokens a
replica's running batch keeps growing for several simulated minutes at a constant rate, so a
probe of a few minutes passes rates that a ten-minute run does not sustain: the rates found here
(~17 req/s per MI355X) sit above what the batch limit allows in steady state (~1,024 sequences
at ~68 ms TPOT: ~15k tokens/s, ~12 req/s, in line with the published Server figure). The
efficiency column compares the fleet and its pools measured the same way; MLPerf-length probes
(`--warmup 300 --minutes 10`) cost about four times the CPU and were not run for this page.

{_efficiency_table(results["Server"]["data"])}

![Server: delivered vs offered tokens/s, and p99 TTFT, per profile](img/bench-server-rate.png)

![MI355X pool's share of output tokens per profile](img/bench-pool-share.png)

## Scale: 8 → 512 MI355X replicas

`{SCALE}` ({_cost(results["scale"])})

Scale efficiency = the Server rate found at N replicas ÷ (N/8 × the rate found at 8), with the
`capacity` profile (1 measured simulated minute per probe after 1 minute of warm-up, bisected
to 2 %). Every size starts its search at N/8 × the 8-replica rate and walks the same relative
grid, so sizes that scale alike land on the same grid point: equal efficiencies below mean
"linear to within the search's 2 %", not more precision than that. The absolute rates share the
short-window caveat above (1 + 1 simulated minutes per probe).

| replicas | req/s | tokens/s | scale efficiency |
|---|---|---|---|
{size_rows}

![Scale efficiency vs fleet size](img/bench-scale.png)

**Timed run** (`{TIMED}`, {_cost(results["timed"])} in all, the 8-replica search included):
{timed["replicas"]} MI355X replicas, {timed["simulated_s"] / 60:g} simulated minutes of Server
load ({timed["requests"]:,} requests) at the fleet model's Server capacity per replica:
**{timed["wall_s"]:.0f} s wall, {timed["cpu_s"]:.0f} s CPU** on one core; p99 TTFT
{timed["ttft_p99_s"]:.2f} s, p99 TPOT {timed["tpot_p99_s"] * 1e3:.1f} ms.

**Routing decision cost** (`python -m orchestrator.bench.decision_cost`, `capacity` profile):
{decision[small]:.1f} µs at {small} replicas, {decision[large]:.1f} µs at {large}
({decision[large] / decision[small]:.2f}×).

## Live: LoadGen through our router and through sglang-router

`{SIDE}`

MLCommons LoadGen's Server scenario (`orchestrator bench loadgen`) over HTTP, against the same
simulated replica processes (time scale 1, outputs capped at 128 tokens so a 2-core machine can
drive it), through our router (`capacity` profile) and through `sglang-router` with
`power_of_two` and `round_robin`. "best q/s" is the highest tried rate whose p99 TTFT and TPOT
are within the limits; LoadGen's own VALID/INVALID verdict is printed too (short runs fall
short of its minimum query counts).

{live_text}

LoadGen over our gRPC `RouterService` runs the same way (`--transport grpc`); both transports
are exercised by `tests/bench/test_bench_loadgen.py`.
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--docs", type=Path, default=Path("docs"))
    parser.add_argument("--reuse", action="store_true", help="reuse bench-data/*.json if present")
    parser.add_argument("--skip-live", action="store_true", help="skip the live side by side")
    parser.add_argument(
        "--only", help="comma-separated sections to run (Offline, Server, scale, live); the "
        "others are read from earlier data and the page is written only when all are there",
    )  # fmt: skip
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    results = collect(args.docs / "img" / "data", args.reuse, args.skip_live, only)
    if not {"Offline", "Server", "scale", "timed"} <= set(results):
        print("some sections have no data yet; not writing the page", file=sys.stderr)
        return 0
    _plots(results, args.docs / "img")
    (args.docs / "benchmarks.md").write_text(render(results))
    print(f"wrote {args.docs / 'benchmarks.md'} and {args.docs / 'img'}/bench-*.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
