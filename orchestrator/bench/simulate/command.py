"""`orchestrator simulate`: one fleet, one scenario, the profiles side by side, in virtual time.

    orchestrator simulate --fleet MI355X:16,MI300X:16 --scenario Server --prior equal \\
        --profile capacity --compare --sum-of-parts

Progress goes to stderr; the table (or JSON) to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from orchestrator.bench.simulate.efficiency import (
    Efficiency,
    PartResult,
    offline_part,
    pool_specs,
    server_part,
)
from orchestrator.bench.simulate.fleet_spec import (
    COMPARED_PROFILES,
    FleetSpec,
    Prior,
    check_profile,
    parse_fleet,
    parse_prior,
    replica_specs,
)
from orchestrator.bench.simulate.scenarios import ServerProbe, ServerSettings
from orchestrator.core.arg_types import from_parser, non_negative_float, one_of, positive_float

SCENARIOS = ("Offline", "Server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fleet", type=from_parser(parse_fleet), default=parse_fleet("MI355X:16,MI300X:16"),
        help="pools as GENERATION:REPLICAS,... (default MI355X:16,MI300X:16)",
    )  # fmt: skip
    parser.add_argument(
        "--scenario", type=one_of(SCENARIOS), required=True, help="Offline or Server"
    )
    parser.add_argument(
        "--profile", type=from_parser(check_profile), action="append",
        help="routing profile (repeatable): capacity, round-robin, least-requests, power-of-two, "
        "weighted-static:GEN=WEIGHT,... (default capacity)",
    )  # fmt: skip
    parser.add_argument(
        "--compare", action="store_true",
        help=f"also run the baselines: {', '.join(COMPARED_PROFILES[1:])}",
    )  # fmt: skip
    parser.add_argument(
        "--sum-of-parts", action="store_true",
        help="also run each pool alone and print efficiency = fleet / sum of pools alone",
    )  # fmt: skip
    parser.add_argument(
        "--prior", type=from_parser(parse_prior), default=Prior.CALIBRATED,
        help="replicas' capacity prior: calibrated (the fleet model's) or equal (all "
        "generations alike: the estimator must learn) (default calibrated)",
    )  # fmt: skip
    parser.add_argument(
        "--minutes", type=positive_float, default=None,
        help="Server: measured simulated minutes per probe (default 5); Offline: minutes of "
        "work in each run's sample set, sized on the fleet model (default 10)",
    )  # fmt: skip
    parser.add_argument(
        "--warmup", type=non_negative_float, default=120.0,
        help="Server: simulated seconds of load before measuring (default 120)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def _progress(label: str) -> Any:
    def show(probe: ServerProbe) -> None:
        verdict = "pass" if probe.passed else ("overloaded" if probe.overloaded else "fail")
        print(
            f"  {label}: {probe.rate_per_s:8.2f} req/s  {probe.tokens_per_s:>11,.0f} tok/s  "
            f"p99 TTFT {probe.ttft_p99_s:6.2f} s  p99 TPOT {probe.tpot_p99_s * 1e3:6.1f} ms  "
            f"{verdict}  ({probe.cpu_s:.1f} CPU s)",
            file=sys.stderr, flush=True,
        )  # fmt: skip

    return show


def evaluate(
    fleet: FleetSpec,
    scenario: str,
    profiles: Sequence[str],
    prior: Prior,
    *,
    sum_of_parts: bool,
    minutes: float | None,
    warmup_s: float,
    seed: int,
) -> list[Efficiency]:
    """Run each profile on the fleet (and on each pool alone when `sum_of_parts`)."""
    specs = replica_specs(fleet, prior)
    parts = pool_specs(specs, fleet) if sum_of_parts else []
    out = []
    for profile in profiles:
        runs: list[PartResult] = []
        for label, subset in [(fleet.label, specs), *parts]:
            print(f"{scenario} · {profile} · {label}", file=sys.stderr, flush=True)
            if scenario == "Offline":
                runs.append(offline_part(label, subset, profile, minutes or 10.0, seed))
                print(f"  {runs[-1].tokens_per_s:,.0f} tok/s", file=sys.stderr, flush=True)
            else:
                settings = ServerSettings(
                    warmup_s=warmup_s, duration_s=(minutes or 5.0) * 60.0, seed=seed
                )
                runs.append(server_part(label, subset, profile, settings, _progress(label)))
        out.append(Efficiency(profile, scenario, runs[0], runs[1:]))
    return out


def format_table(fleet: FleetSpec, prior: Prior, results: Sequence[Efficiency]) -> str:
    scenario = results[0].scenario
    pools = [p.label for p in fleet.pools]
    parts = bool(results[0].parts)
    header = f"{'profile':<34}{'fleet tok/s':>13}"
    if parts:
        header += "".join(f"{label + ' alone':>18}" for label in pools)
        header += f"{'sum of parts':>14}{'efficiency':>12}"
    header += "".join(f"{'share ' + p.generation.value:>14}" for p in fleet.pools)
    lines = [
        f"fleet {fleet.label} · {scenario} · prior {prior.value} · virtual time",
        header,
        "-" * len(header),
    ]
    for result in results:
        row = f"{result.profile:<34}{result.fleet.tokens_per_s:>13,.0f}"
        if parts:
            row += "".join(f"{p.tokens_per_s:>18,.0f}" for p in result.parts)
            row += f"{result.sum_of_parts:>14,.0f}{result.ratio:>11.1%} "
        shares = result.fleet.pool_shares
        row += "".join(
            f"{shares.get(fleet.pool_name(p.generation), 0.0):>14.1%}" for p in fleet.pools
        )
        lines.append(row)
    return "\n".join(lines)


def as_json(fleet: FleetSpec, prior: Prior, results: Sequence[Efficiency]) -> dict[str, Any]:
    def part(p: PartResult) -> dict[str, Any]:
        return {"label": p.label, "tokens_per_s": p.tokens_per_s, "pool_shares": p.pool_shares}

    return {
        "fleet": fleet.label,
        "prior": prior.value,
        "results": [
            {
                "profile": r.profile,
                "scenario": r.scenario,
                "fleet": part(r.fleet),
                "parts": [part(p) for p in r.parts],
                "sum_of_parts_tokens_per_s": r.sum_of_parts if r.parts else None,
                "efficiency": r.ratio if r.parts else None,
            }
            for r in results
        ],
    }


def run(args: argparse.Namespace) -> int:
    profiles = list(args.profile or ["capacity"])
    if args.compare:
        profiles += [p for p in COMPARED_PROFILES if p not in profiles]
    cpu, wall = time.process_time(), time.perf_counter()
    results = evaluate(
        args.fleet, args.scenario, profiles, args.prior, sum_of_parts=args.sum_of_parts,
        minutes=args.minutes,
        warmup_s=args.warmup, seed=args.seed,
    )  # fmt: skip
    if args.json:
        print(json.dumps(as_json(args.fleet, args.prior, results), indent=2))
    else:
        print(format_table(args.fleet, args.prior, results))
        print(f"({time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orchestrator simulate", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args)
