"""`orchestrator plan`: the cheapest mix within the limits, checked in virtual time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from orchestrator.bench.plan.offers import PlanRequest, SloTargets, Workload, parse_offer
from orchestrator.bench.plan.planner import Mix, candidate_mixes, check, model_rate_per_s
from orchestrator.cli import main
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.fleet.figures import load_figures

OFFERS = (parse_offer("MI355X@us:max=16:price=4.0"), parse_offer("MI300X@kr:max=16:price=1.0"))


def request(requests_per_s: float, **extra: object) -> PlanRequest:
    fields: dict[str, object] = {
        "requests_per_s": requests_per_s, "workload": Workload(),
        "slo": SloTargets.mlperf_server(), "offers": OFFERS,
    }  # fmt: skip
    fields.update(extra)
    return PlanRequest(**fields)  # type: ignore[arg-type]


def test_offers_parse_generation_site_limit_and_price() -> None:
    offer = parse_offer("mi355x@us:max=8:price=4.5")
    assert (offer.generation, offer.site, offer.max_gpus, offer.price_per_gpu_hour) == (
        Generation.MI355X, "us", 8, 4.5,
    )  # fmt: skip
    assert offer.watts_per_gpu == 1400
    for bad in ("MI999X", "MI355X:max=0", "MI355X:cost=3", "MI355X:max=two"):
        with pytest.raises(OrchestratorError):
            parse_offer(bad)


def test_candidates_come_cheapest_first_and_each_covers_the_demand_with_headroom() -> None:
    plan_request = request(30.0)
    mixes = list(candidate_mixes(plan_request))
    prices = [m.price_per_hour for m in mixes]
    assert prices == sorted(prices)  # type: ignore[type-var]
    assert all(model_rate_per_s(m, plan_request) >= 33.0 for m in mixes)
    assert all(m.counts[0] <= 16 and m.counts[1] <= 16 for m in mixes)


def test_site_limits_and_the_power_cap_leave_out_the_mixes_that_break_them() -> None:
    limited = request(30.0, site_limits={"us": 2}, power_cap_w=8_000, objective="power")
    for mix in candidate_mixes(limited):
        assert mix.counts[0] <= 2 and mix.watts <= 8_000
    assert list(candidate_mixes(request(300.0, site_limits={"us": 2, "kr": 2}))) == []


def test_a_cost_plan_without_prices_is_refused_with_a_message() -> None:
    with pytest.raises(OrchestratorError, match="price"):
        request(10.0, offers=(parse_offer("MI355X"),))


@pytest.mark.slow
def test_the_published_heterogeneous_point_meets_the_server_slo_at_its_published_throughput() -> (
    None
):
    """16 MI355X + 16 MI300X, GPT-OSS-120B Server: the fleet model predicts the fleet's published
    Server throughput within 10%, and the fleet serves it in virtual time within the SLO."""
    figures = load_figures()
    published = 16 * sum(
        figures.measured[g].server_tokens_per_s for g in (Generation.MI355X, Generation.MI300X)
    )
    demand = request(published / figures.workload.mean_output_tokens, headroom=0.0)
    fleet = Mix(tuple(OFFERS), (16, 16))
    predicted = model_rate_per_s(fleet, demand) * figures.workload.mean_output_tokens
    assert predicted == pytest.approx(published, rel=0.10)
    result = check(fleet, demand, demand.requests_per_s, warmup_s=30.0, duration_s=60.0, seed=0)
    print(f"\n{result}")
    assert result.passed and result.goodput_share >= 0.99
    smaller = check(fleet.scaled(0.5), demand, demand.requests_per_s, warmup_s=30.0,
                    duration_s=60.0, seed=0)  # fmt: skip
    assert not smaller.passed and smaller.goodput_per_s < result.goodput_per_s


def test_plan_prints_the_cheapest_passing_mix_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([
        "plan", "--requests-per-s", "8", "--offer", "MI355X@us:max=2:price=4",
        "--offer", "MI300X@kr:max=4:price=1", "--minutes", "0.5", "--warmup-s", "20",
        "--no-curve", "--json",
    ])  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["passed"] and out["plan"]["price_per_hour"] <= 4.0
    assert out["at_demand"]["goodput_share"] >= 0.99
    assert out["model_margin"] >= 0.10


def test_plan_without_a_fitting_mix_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--requests-per-s", "500", "--offer", "MI300X:max=2", "--no-curve"])
    assert code == 1
    assert "no mix within the limits" in capsys.readouterr().out


def test_plot_without_matplotlib_says_how_to_get_it_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["plan", "--requests-per-s", "5", "--offer", "MI355X", "--plot",
                 str(tmp_path / "p.png")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "needs the optional 'bench' extra" in err and "matplotlib" in err


def test_a_lengths_file_sets_the_workload_and_bad_lines_are_named(tmp_path: Path) -> None:
    good = tmp_path / "lengths.txt"
    good.write_text("# prompt output\n1000 200\n3000, 600\n")
    code = main(["plan", "--tokens-per-s", "2000", "--offer", "MI355X:max=2", "--lengths",
                 str(good), "--minutes", "0.5", "--warmup-s", "10", "--no-curve"])  # fmt: skip
    assert code == 0
    bad = tmp_path / "bad.txt"
    bad.write_text("1000 200\n12 x\n")
    assert main(["plan", "--tokens-per-s", "2000", "--offer", "MI355X", "--lengths",
                 str(bad)]) == 2  # fmt: skip
