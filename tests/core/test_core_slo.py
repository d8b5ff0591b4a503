"""Latency targets per model and class: which one a request gets, and its outcome against it."""

from __future__ import annotations

import pytest

from orchestrator.core.slo import (
    DEFAULT_TARGET,
    ModelTargets,
    SloOutcome,
    SloTarget,
    SloTargets,
)

TIGHT = SloTarget(1.0, 0.05)
LOOSE = SloTarget(30.0, 0.2)
SMALL_MODEL = SloTarget(0.5, 0.02)


def targets() -> SloTargets:
    return SloTargets(
        classes={"interactive": TIGHT, "batch": LOOSE},
        models={"small": ModelTargets(SMALL_MODEL, {"premium": SloTarget(0.2, 0.01)})},
    )


def test_the_default_is_mlperfs_server_limits() -> None:
    assert SloTargets().target("any", "interactive") == SloTarget(3.0, 0.08) == DEFAULT_TARGET


@pytest.mark.parametrize(
    ("model", "slo_class", "expected"),
    [
        ("big", "interactive", TIGHT),  # the class's fleet-wide target
        ("big", "batch", LOOSE),
        ("big", "unnamed", DEFAULT_TARGET),  # neither: the default
        ("small", "premium", SloTarget(0.2, 0.01)),  # the model's own class
        ("small", "batch", LOOSE),  # a fleet-wide class over the model's default
        ("small", "unnamed", SMALL_MODEL),  # the model's default over the fleet's
    ],
)
def test_a_request_gets_the_most_specific_target(
    model: str, slo_class: str, expected: SloTarget
) -> None:
    assert targets().target(model, slo_class) == expected


def test_operator_named_classes_follow_the_builtin_ones() -> None:
    assert targets().class_names() == ("interactive", "batch", "premium")


def test_scaling_stretches_every_target_for_slower_replicas() -> None:
    scaled = targets().scaled(10)
    assert scaled.target("big", "batch") == SloTarget(300.0, 2.0)
    assert scaled.target("small", "premium") == SloTarget(2.0, 0.1)


@pytest.mark.parametrize(
    ("ttft_s", "tpot_s", "e2e_s", "outcome"),
    [
        (0.9, 0.04, 50.0, SloOutcome.MET),
        (1.1, 0.04, 50.0, SloOutcome.MISSED_TTFT),
        (0.9, 0.06, 50.0, SloOutcome.MISSED_TPOT),
        (None, None, 50.0, SloOutcome.MET),  # not streamed: nothing to hold against it
        (0.9, 0.04, 61.0, SloOutcome.MISSED_E2E),
    ],
)
def test_an_answer_is_judged_against_its_target(
    ttft_s: float | None, tpot_s: float | None, e2e_s: float, outcome: SloOutcome
) -> None:
    target = SloTarget(1.0, 0.05, e2e_s=60.0)
    assert target.outcome(ttft_s=ttft_s, tpot_s=tpot_s, e2e_s=e2e_s) is outcome


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_a_target_must_be_a_positive_finite_time(bad: float) -> None:
    with pytest.raises(ValueError, match="tpot_s"):
        SloTarget(1.0, bad)
