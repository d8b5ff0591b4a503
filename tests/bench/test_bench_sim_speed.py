"""The side-by-side simulation-speed bench: probes in fresh processes, digests that compare."""

from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator
from orchestrator.bench.simulate import speed

TREE = Path(orchestrator.__file__).resolve().parent.parent


def test_a_tree_beside_itself_makes_the_same_picks_and_results() -> None:
    comparisons, growth = speed.compare(TREE, TREE, [2, 3], minutes=0.2, repeats=1, seed=4)
    assert [c.replicas for c in comparisons] == [2, 3]
    for c in comparisons:
        assert c.same_picks and c.same_results
        assert c.current.requests > 20 and c.current.steps > c.current.requests
        assert c.current.cpu_s > 0 and c.current.peak_rss_bytes > 10 << 20
    assert growth.replicas == 3 and growth.short_minutes == pytest.approx(0.04)
    table = speed.format_table(comparisons, growth)
    assert "same   same" in table and "peak memory, 3 replicas" in table


def test_the_tree_run_from_its_sources_makes_the_same_picks_and_results() -> None:
    # With the mypyc build the baseline is this tree's pure Python; without it, both are.
    pure = speed.run_probe(TREE, 2, 0.1, seed=3, pure=True)
    assert pure["build"] in ("pure", "sources (ORCHESTRATOR_PURE)")
    # "sources (stale build)": a compiled module edited since the last install (docs/compiled.md)
    assert speed.run_probe(TREE, 2, 0.1, seed=3)["build"] in (
        "pure", "compiled", "sources (stale build)",
    )  # fmt: skip
    comparisons, _ = speed.compare(TREE, TREE, [2], 0.1, repeats=1, seed=3, baseline_pure=True)
    assert comparisons[0].same_picks and comparisons[0].same_results


def test_another_seed_changes_the_picks_digest() -> None:
    first = speed.run_probe(TREE, 2, 0.1, seed=1)
    second = speed.run_probe(TREE, 2, 0.1, seed=2)
    assert first["picks_digest"] != second["picks_digest"]


def test_a_baseline_without_a_virtual_fleet_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        speed.main(["--baseline", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "holds no orchestrator/ tree" in capsys.readouterr().err


def test_a_small_fleet_makes_the_picks_and_results_it_always_made() -> None:
    # Digests of today's simulation (8 MI355X, 12 s of Server load, seed 0): a faster one must
    # decide exactly as this one does.
    from orchestrator.bench.simulate import speed_probe

    result = speed_probe.probe(8, 0.2, 0)
    assert (result["requests"], result["steps"]) == (1099, 52141)
    assert result["picks_digest"] == "956592fc6fb5ca1d41b0eaf3896e0b3a"
    # The results digest holds `LatencyRecord`s (bucket counts and every value's bits); the probe
    # records an old
    # tree's kept lists the same way, and that tree (2f0679d) printed this same digest.
    assert result["results_digest"] == "5d5d9e194133d1e93faa58794871a52f"
