"""Simulation speed side by side: this tree's virtual fleet beside another tree's, in one run.

    python -m orchestrator.bench.simulate.speed --baseline DIR [--sizes 8,128,512]
        [--minutes 10] [--repeats 3] [--seed 0] [--json]
    python -m orchestrator.bench.simulate.speed --pure-baseline [--baseline DIR] ...

DIR holds another checkout's `orchestrator` package, e.g. today's code before a change:
`git archive <commit> orchestrator | tar -x -C DIR`. For each size, `speed_probe.py` runs once
per tree and repeat in a fresh process (trees alternate, so drift on a shared machine hits both):
N MI355X replicas under MINUTES simulated minutes of Server load at the fleet model's rate. The
table gives medians of wall and CPU seconds (CPU is the one-core figure; the machine may be
shared), the spread over repeats, peak resident memory, and whether both trees made the same
picks and produced the same results. A last pair of runs at a fifth of the duration on the
largest fleet shows whether memory grows with simulated time. With `--pure-baseline` the
baseline's mypyc-compiled modules run from their sources (ORCHESTRATOR_PURE=1), so this tree
compiled and this tree pure compare side by side (docs/compiled.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orchestrator
from orchestrator._compiled import PURE_ENV
from orchestrator.core.arg_types import positive_float, positive_int, positive_ints

PROBE = Path(__file__).with_name("speed_probe.py")
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class TreeTiming:
    """Medians over repeats; `cpu_spread` is (max − min) / median of the CPU seconds."""

    wall_s: float
    cpu_s: float
    cpu_spread: float
    peak_rss_bytes: int
    requests: int
    steps: int
    picks_digest: str
    results_digest: str


@dataclass(frozen=True, slots=True)
class SizeComparison:
    replicas: int
    minutes: float
    baseline: TreeTiming
    current: TreeTiming

    @property
    def cpu_speedup(self) -> float:
        return self.baseline.cpu_s / self.current.cpu_s if self.current.cpu_s > 0 else 0.0

    @property
    def same_picks(self) -> bool:
        return self.baseline.picks_digest == self.current.picks_digest

    @property
    def same_results(self) -> bool:
        return self.baseline.results_digest == self.current.results_digest


@dataclass(frozen=True, slots=True)
class MemoryGrowth:
    """Peak RSS of the largest fleet at a fifth of the duration and at the full duration."""

    replicas: int
    short_minutes: float
    minutes: float
    baseline_bytes: tuple[int, int]
    current_bytes: tuple[int, int]


def run_probe(
    tree: Path, replicas: int, minutes: float, seed: int, *, pure: bool = False
) -> dict[str, Any]:
    """One probe in a fresh interpreter importing `orchestrator` from `tree`, as built; with
    `pure`, the tree's mypyc-compiled modules run from their sources (ORCHESTRATOR_PURE=1)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop(PURE_ENV, None)
    if pure:
        env[PURE_ENV] = "1"
    done = subprocess.run(
        [sys.executable, str(PROBE), str(replicas), repr(minutes), str(seed)],
        env=env, cwd=tree, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"probe on {tree} failed:\n{done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _summarise(runs: Sequence[dict[str, Any]]) -> TreeTiming:
    cpu = [r["cpu_s"] for r in runs]
    median_cpu = statistics.median(cpu)
    digests = {(r["picks_digest"], r["results_digest"]) for r in runs}
    if len(digests) != 1:
        raise RuntimeError("one tree decided differently across repeats of the same seed")
    return TreeTiming(
        wall_s=statistics.median(r["wall_s"] for r in runs),
        cpu_s=median_cpu,
        cpu_spread=(max(cpu) - min(cpu)) / median_cpu if median_cpu > 0 else 0.0,
        peak_rss_bytes=max(r["peak_rss_bytes"] for r in runs),
        requests=runs[0]["requests"],
        steps=runs[0]["steps"],
        picks_digest=runs[0]["picks_digest"],
        results_digest=runs[0]["results_digest"],
    )


def compare(
    baseline: Path,
    current: Path,
    sizes: Sequence[int],
    minutes: float,
    repeats: int,
    seed: int,
    *,
    baseline_pure: bool = False,
) -> tuple[list[SizeComparison], MemoryGrowth]:
    """`baseline_pure`: the baseline's compiled modules run from source (it may be `current`)."""
    trees = {"baseline": (baseline, baseline_pure), "this tree": (current, False)}

    def probe(label: str, size: int, probe_minutes: float) -> dict[str, Any]:
        tree, pure = trees[label]
        return run_probe(tree, size, probe_minutes, seed, pure=pure)

    comparisons = []
    for size in sizes:
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
        for repeat in range(repeats):
            order = ("baseline", "this tree") if repeat % 2 == 0 else ("this tree", "baseline")
            for label in order:
                print(
                    f"  {size} replicas, {minutes:g} min, {label} ...", file=sys.stderr, flush=True
                )
                runs[label].append(probe(label, size, minutes))
        comparisons.append(
            SizeComparison(
                size, minutes, _summarise(runs["baseline"]), _summarise(runs["this tree"])
            )
        )
    largest = max(sizes)
    short = minutes / 5
    print(f"  memory: {largest} replicas, {short:g} min, both trees ...", file=sys.stderr)
    short_rss = {label: probe(label, largest, short)["peak_rss_bytes"] for label in trees}
    full = next(c for c in comparisons if c.replicas == largest)
    growth = MemoryGrowth(
        largest, short, minutes,
        (short_rss["baseline"], full.baseline.peak_rss_bytes),
        (short_rss["this tree"], full.current.peak_rss_bytes),
    )  # fmt: skip
    return comparisons, growth


def format_table(comparisons: Sequence[SizeComparison], growth: MemoryGrowth) -> str:
    header = (
        f"{'replicas':>8} {'requests':>10} | {'baseline wall s':>15} {'CPU s':>8} {'±':>5} | "
        f"{'this wall s':>11} {'CPU s':>8} {'±':>5} | {'CPU speed-up':>12} | "
        f"{'peak MiB base/this':>18} | picks  results"
    )
    lines = [header, "-" * len(header)]
    for c in comparisons:
        b, n = c.baseline, c.current
        lines.append(
            f"{c.replicas:>8} {n.requests:>10,} | {b.wall_s:>15.1f} {b.cpu_s:>8.1f} "
            f"{b.cpu_spread:>5.0%} | {n.wall_s:>11.1f} {n.cpu_s:>8.1f} {n.cpu_spread:>5.0%} | "
            f"{c.cpu_speedup:>11.2f}× | "
            f"{b.peak_rss_bytes / MIB:>8.0f} / {n.peak_rss_bytes / MIB:<7.0f} | "
            f"{'same' if c.same_picks else 'DIFFER':6} {'same' if c.same_results else 'DIFFER'}"
        )
    g = growth
    lines.append(
        f"peak memory, {g.replicas} replicas at {g.short_minutes:g} → {g.minutes:g} simulated min: "
        f"baseline {g.baseline_bytes[0] / MIB:.0f} → {g.baseline_bytes[1] / MIB:.0f} MiB, "
        f"this tree {g.current_bytes[0] / MIB:.0f} → {g.current_bytes[1] / MIB:.0f} MiB"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="tree holding orchestrator/")
    parser.add_argument(
        "--pure-baseline",
        action="store_true",
        help="run the baseline's mypyc-compiled modules from source (ORCHESTRATOR_PURE=1); "
        "without --baseline, the baseline is this tree itself",
    )
    parser.add_argument(
        "--sizes", type=positive_ints, default=(8, 128, 512), help="fleet sizes, comma-separated"
    )
    parser.add_argument(
        "--minutes", type=positive_float, default=10.0, help="simulated minutes per run"
    )
    parser.add_argument("--repeats", type=positive_int, default=3, help="runs per tree and size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = list(args.sizes)
    current = Path(orchestrator.__file__).resolve().parent.parent
    if args.baseline is None and not args.pure_baseline:
        parser.error("--baseline is required unless --pure-baseline compares this tree with itself")
    baseline = current if args.baseline is None else args.baseline.resolve()
    if not (baseline / "orchestrator" / "bench" / "virtual_fleet.py").is_file():
        parser.error(f"--baseline: {baseline} holds no orchestrator/ tree with a virtual fleet")
    comparisons, growth = compare(
        baseline, current, sizes, args.minutes, args.repeats, args.seed,
        baseline_pure=args.pure_baseline,
    )  # fmt: skip
    if args.json:
        rows = [
            {**asdict(c), "cpu_speedup": c.cpu_speedup, "same_picks": c.same_picks,
             "same_results": c.same_results}
            for c in comparisons
        ]  # fmt: skip
        print(json.dumps({"sizes": rows, "memory": asdict(growth)}, indent=2))
    else:
        print(format_table(comparisons, growth))
    return 0 if all(c.same_picks and c.same_results for c in comparisons) else 1


if __name__ == "__main__":
    raise SystemExit(main())
