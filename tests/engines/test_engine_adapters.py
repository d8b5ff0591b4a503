"""Finding the adapter for an engine kind, and what every adapter declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.records import EngineKind
from orchestrator.engines import ExternalAdapter, UnknownEngineKindError, adapter_for, sglang, vllm

PAGES = Path(__file__).parent / "pages"


@pytest.mark.parametrize("kind", list(EngineKind))
def test_each_engine_kind_has_an_adapter_of_that_kind_with_a_health_path(kind: EngineKind) -> None:
    adapter = adapter_for(kind)

    assert adapter.kind is kind
    assert adapter.health_path == "/health"


def test_kind_may_be_given_as_text_in_any_case() -> None:
    assert adapter_for("vLLM") is adapter_for(EngineKind.VLLM)
    assert adapter_for(" sglang ") is adapter_for(EngineKind.SGLANG)


def test_unknown_kind_is_an_error_that_quotes_it_and_lists_the_known_kinds() -> None:
    with pytest.raises(
        ValueError, match=r"unknown engine kind 'nope'; known kinds: sim, vllm"
    ) as e:
        adapter_for("nope")

    assert isinstance(e.value, UnknownEngineKindError)
    assert e.value.param == "engine"


def test_simulated_engine_shares_vllms_metric_table() -> None:
    assert adapter_for("sim").metric_names is vllm.METRIC_NAMES


def test_external_replicas_are_read_with_vllm_names_unless_told_they_run_sglang() -> None:
    page = (PAGES / "sglang.txt").read_text()
    external_sglang = ExternalAdapter(metric_names=sglang.METRIC_NAMES)

    assert adapter_for("external").metric_names is vllm.METRIC_NAMES
    assert external_sglang.parse_load(page, now_s=0.0).running == 5
    assert external_sglang.kind is EngineKind.EXTERNAL
