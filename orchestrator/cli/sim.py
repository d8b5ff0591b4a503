"""Commands `orchestrator sim serve` (one simulated replica) and `orchestrator fleet calibrate`
(the capacity model's fit on the MLPerf figures)."""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.core.arg_types import from_parser, non_negative_float, port
from orchestrator.core.generations import Generation, parse_generation

_generation = from_parser(parse_generation)


def cmd_sim_serve(args: argparse.Namespace) -> int:
    from orchestrator.sim.replica import ReplicaSettings, serve_forever

    settings = ReplicaSettings(
        generation=args.generation,
        model_name=args.served_model_name,
        time_scale=args.time_scale,
        seed=args.seed,
    )
    print(
        f"simulated {args.generation.value} replica of {args.served_model_name} on "
        f"http://{args.host}:{args.port} (time scale {args.time_scale:g}); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    serve_forever(settings, args.host, args.port)
    return 0


def cmd_fleet_calibrate(args: argparse.Namespace) -> int:
    from orchestrator.fleet.figures import calibration_path, load_figures
    from orchestrator.sim.calibration import calibrate_generation
    from orchestrator.sim.calibration_report import (
        format_table,
        to_json,
        write_efficiencies,
        write_server_capacities,
    )

    figures = load_figures()
    generations = args.generation or list(Generation)
    results = []
    for generation in generations:
        has_target = figures.offline_target_tokens_per_s(generation) is not None
        action = "fitting Offline, predicting Server" if has_target else "predicting"
        print(f"{generation.value}: {action} ...", file=sys.stderr, flush=True)
        results.append(calibrate_generation(generation, figures=figures, seed=args.seed))
    if args.json:
        print(json.dumps(to_json(results), indent=2))
    else:
        print(format_table(results))
    if args.write:
        fitted = {
            r.generation: r.sequence_efficiency
            for r in results
            if figures.offline_target_tokens_per_s(r.generation) is not None
        }
        write_efficiencies(calibration_path(), fitted)
        capacities = {r.generation: r.server.tokens_per_s for r in results}
        write_server_capacities(calibration_path(), capacities)
        print(
            f"wrote {len(fitted)} efficiencies and {len(capacities)} capacity priors to "
            f"{calibration_path()}",
            file=sys.stderr,
        )
    return 0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = commands.add_parser("sim", help="the simulated engine").add_subparsers(
        dest="sim_command", required=True, metavar="SUBCOMMAND"
    )
    serve = sim.add_parser("serve", help="serve one simulated replica (vLLM's OpenAI API)")
    serve.add_argument("--generation", type=_generation, required=True, help="e.g. MI355X, MI300X")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=8101, help="port (default 8101)")
    serve.add_argument(
        "--time-scale", type=non_negative_float, default=1.0,
        help="wall seconds per simulated second: >1 slows the replica down so a small machine "
        "can host several; 0 answers with no delay (default 1)",
    )  # fmt: skip
    serve.add_argument("--served-model-name", default="openai/gpt-oss-120b")
    serve.add_argument("--seed", type=int, default=0, help="seed for lengths and text")
    serve.set_defaults(handler=cmd_sim_serve)

    fleet = commands.add_parser("fleet", help="the capacity model").add_subparsers(
        dest="fleet_command", required=True, metavar="SUBCOMMAND"
    )
    calibrate = fleet.add_parser(
        "calibrate", help="fit efficiencies on MLPerf Offline, predict Server, print the table"
    )
    calibrate.add_argument("--json", action="store_true", help="print JSON instead of a table")
    calibrate.add_argument(
        "--generation", type=_generation, action="append",
        help="only this generation (repeatable; default all)",
    )  # fmt: skip
    calibrate.add_argument("--seed", type=int, default=0)
    calibrate.add_argument(
        "--write",
        action="store_true",
        help="store the fitted efficiencies and predicted capacities in the package data",
    )
    calibrate.set_defaults(handler=cmd_fleet_calibrate)
