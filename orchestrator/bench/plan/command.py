"""`orchestrator plan`: arguments, the search, and its table, JSON and plot.

    orchestrator plan --requests-per-s 220 --offer MI355X@us:max=16:price=4.1 \\
        --offer MI300X@kr:max=16:price=1.9 [--site-limit us=24] [--power-cap-w 30000] \\
        [--objective cost|power] [--headroom 0.1] [--lengths FILE] [--plot plan.png] [--json]

Progress goes to stderr; the table (or JSON) to stdout. Exit 0 with a plan, 1 when no mix within
the limits meets the SLO, 2 on bad arguments or, with --plot, without matplotlib (the `bench`
extra; the command line says how to install it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestrator.bench.plan.offers import (
    PlanRequest,
    SloTargets,
    Workload,
    parse_offer,
    read_lengths,
)
from orchestrator.bench.plan.planner import Check, Plan, plan
from orchestrator.core.arg_types import from_parser, non_negative_float, positive_float, seconds
from orchestrator.core.generations import Generation

EXIT_NO_PLAN = 1


def _site_limit(text: str) -> tuple[str, int]:
    site, equals, count = text.partition("=")
    if not equals or not site.strip() or not count.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected SITE=GPUS, got {text!r}")
    return site.strip(), int(count)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    demand = parser.add_mutually_exclusive_group(required=True)
    demand.add_argument("--requests-per-s", type=positive_float, help="demand in requests/s")
    demand.add_argument("--tokens-per-s", type=positive_float, help="demand in output tokens/s")
    parser.add_argument(
        "--offer", type=from_parser(parse_offer), action="append", required=True,
        metavar="GEN[@SITE][:max=N][:price=P]",
        help="GPUs on offer (repeatable): generation, site, most GPUs, price per GPU-hour",
    )  # fmt: skip
    parser.add_argument(
        "--site-limit", type=_site_limit, action="append", default=[], metavar="SITE=GPUS",
        help="most GPUs in a site, all generations together (repeatable)",
    )  # fmt: skip
    parser.add_argument("--power-cap-w", type=positive_float, help="most watts (rated TDP) in all")
    parser.add_argument(
        "--objective", choices=("cost", "power"), default=None,
        help="minimise price (default when every offer has one) or rated power",
    )  # fmt: skip
    parser.add_argument(
        "--headroom", type=non_negative_float, default=0.10,
        help="the SLO must hold at demand × (1 + this) (default 0.10)",
    )  # fmt: skip
    defaults = SloTargets.mlperf_server()
    parser.add_argument("--ttft-s", type=seconds, default=defaults.ttft_s, help="p99 TTFT target")
    parser.add_argument("--tpot-s", type=seconds, default=defaults.tpot_s, help="p99 TPOT target")
    parser.add_argument(
        "--lengths", type=Path,
        help="request lengths, one `PROMPT OUTPUT` per line (default: MLPerf's)",
    )  # fmt: skip
    parser.add_argument(
        "--minutes", type=positive_float, default=3.0, help="measured simulated minutes per check"
    )  # fmt: skip
    parser.add_argument(
        "--warmup-s", type=non_negative_float, default=60.0, help="simulated warm-up per check"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-curve", action="store_true", help="skip the goodput-vs-size runs")
    parser.add_argument(
        "--plot", type=Path, help="write goodput vs fleet size (PNG; needs [bench])"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_request(
    args: argparse.Namespace, capacity_tokens_per_s: Mapping[Generation, float]
) -> PlanRequest:
    """The plan request the arguments describe (raises `OrchestratorError` when they do not)."""
    workload = read_lengths(args.lengths) if args.lengths else Workload()
    rate = args.requests_per_s
    if rate is None:
        rate = args.tokens_per_s / workload.mean_output_tokens
    objective = args.objective
    if objective is None:
        priced = all(o.price_per_gpu_hour is not None for o in args.offer)
        objective = "cost" if priced else "power"
    return PlanRequest(
        requests_per_s=rate, workload=workload, slo=SloTargets(args.ttft_s, args.tpot_s),
        offers=tuple(args.offer), site_limits=dict(args.site_limit),
        power_cap_w=args.power_cap_w, objective=objective, headroom=args.headroom,
        capacity_tokens_per_s=dict(capacity_tokens_per_s),
    )  # fmt: skip


def _check_json(c: Check) -> dict[str, Any]:
    return {
        "mix": {o.label: n for o, n in zip(c.mix.offers, c.mix.counts, strict=True) if n},
        "gpus": c.mix.gpus, "watts": c.mix.watts, "price_per_hour": c.mix.price_per_hour,
        "rate_per_s": c.rate_per_s, "model_rate_per_s": c.model_rate_per_s,
        "ttft_p99_s": c.ttft_p99_s, "tpot_p99_s": c.tpot_p99_s,
        "goodput_per_s": c.goodput_per_s, "goodput_share": c.goodput_share, "passed": c.passed,
    }  # fmt: skip


def to_json(result: Plan) -> dict[str, Any]:
    request = result.request
    return {
        "demand_requests_per_s": request.requests_per_s,
        "demand_tokens_per_s": request.requests_per_s * request.workload.mean_output_tokens,
        "workload": request.workload.source,
        "slo": asdict(request.slo),
        "objective": request.objective,
        "headroom": request.headroom,
        "candidates": result.candidates,
        "plan": _check_json(result.chosen) if result.chosen else None,
        "at_demand": _check_json(result.at_demand) if result.at_demand else None,
        "model_margin": result.model_margin,
        "checks": [_check_json(c) for c in result.checks],
        "curve": [_check_json(c) for c in result.curve],
    }


def format_table(result: Plan) -> str:
    request = result.request
    lines = [
        f"demand {request.requests_per_s:.1f} req/s "
        f"({request.requests_per_s * request.workload.mean_output_tokens:,.0f} output tokens/s, "
        f"{request.workload.source}); SLO p99 TTFT ≤ {request.slo.ttft_s:g} s, "
        f"p99 TPOT ≤ {request.slo.tpot_s * 1e3:g} ms at demand × {1 + request.headroom:.2f}; "
        f"minimising {request.objective}",
        f"{'mix':<40} {'GPUs':>5} {'kW':>6} {'$/h':>8} {'model req/s':>11} "
        f"{'p99 TTFT':>9} {'p99 TPOT':>9} {'goodput':>8}  verdict",
    ]
    for c in result.checks:
        price = "-" if c.mix.price_per_hour is None else f"{c.mix.price_per_hour:.2f}"
        lines.append(
            f"{c.mix.label:<40} {c.mix.gpus:>5} {c.mix.watts / 1e3:>6.1f} {price:>8} "
            f"{c.model_rate_per_s:>11.1f} {c.ttft_p99_s:>8.2f}s {c.tpot_p99_s * 1e3:>7.1f}ms "
            f"{c.goodput_share:>8.1%}  {'pass' if c.passed else 'fail'}"
        )
    if result.chosen is None:
        lines.append(
            f"no mix within the limits meets the SLO ({result.candidates} candidates, "
            f"{len(result.checks)} simulated)"
        )
        return "\n".join(lines)
    chosen, at = result.chosen, result.at_demand
    lines.append(f"plan: {chosen.mix.label}")
    if at is not None:
        lines.append(
            f"at the demand itself: goodput {at.goodput_per_s:.1f} req/s ({at.goodput_share:.1%}), "
            f"p99 TTFT {at.ttft_p99_s:.2f} s, p99 TPOT {at.tpot_p99_s * 1e3:.1f} ms; "
            f"fleet-model margin {result.model_margin or 0.0:+.0%}"
        )
    return "\n".join(lines)


def write_plot(result: Plan, path: Path) -> None:
    """Goodput against fleet size: the plan's scaled copies and every mix checked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    if result.curve:
        axes.plot(
            [c.mix.gpus for c in result.curve], [c.goodput_per_s for c in result.curve],
            marker="o", label="the plan's mix, scaled (at demand)",
        )  # fmt: skip
    for c in result.checks:
        axes.scatter(
            [c.mix.gpus], [c.goodput_per_s], marker="x",
            label=f"{c.mix.label} at demand × {1 + result.request.headroom:.2f}",
        )  # fmt: skip
    axes.axhline(result.request.requests_per_s, color="grey", linestyle="--", label="demand")
    axes.set_xlabel("fleet size (GPUs)")
    axes.set_ylabel("goodput (requests/s within the SLO)")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run(args: argparse.Namespace, capacity_tokens_per_s: Mapping[Generation, float]) -> int:
    """Run the search the arguments describe and print it; the exit status."""
    if args.plot is not None:  # before the search: a missing `bench` extra fails at once
        import matplotlib  # noqa: F401
    request = build_request(args, capacity_tokens_per_s)
    result = plan(
        request, warmup_s=args.warmup_s, duration_s=args.minutes * 60.0, seed=args.seed,
        curve=not args.no_curve,
    )  # fmt: skip
    print(json.dumps(to_json(result), indent=2) if args.json else format_table(result))
    if args.plot is not None:
        write_plot(result, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0 if result.chosen is not None else EXIT_NO_PLAN
