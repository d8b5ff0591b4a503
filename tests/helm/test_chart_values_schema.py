"""values.schema.json refuses bad values before anything renders, naming the value; the chart's
generation table is the one in orchestrator/core/generations.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chart import CHART, merged_values, render, validate_values, value_sets
from helm_python import HelmValuesError

from orchestrator.core.generations import GENERATIONS, Generation


def pool(**fields: Any) -> dict[str, Any]:
    base = {"name": "kr-a", "site": "kr", "generation": "MI300X", "engine": "vllm", "replicas": 1}
    base.update(fields)
    return {key: value for key, value in base.items() if value is not None}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"pools": [pool(generation="MI400X")]},
            r"/pools/0/generation.*one of 'MI300X', 'MI325X', 'MI350X', 'MI355X'",
            id="unknown-generation",
        ),
        pytest.param(
            {"pools": [pool(site=None)]}, r"/pools/0.*missing property 'site'", id="no-site"
        ),
        pytest.param(
            {"pools": [pool(replicas=-1)]}, r"/pools/0/replicas.*minimum", id="negative-replicas"
        ),
        pytest.param(
            {"pools": [pool(workers={"replicas": -2, "gpus": 8})]},
            r"/pools/0/workers/replicas.*minimum",
            id="negative-worker-replicas",
        ),
        pytest.param(
            {"router": {"httpPort": 70000}}, r"/router/httpPort.*maximum", id="port-too-high"
        ),
        pytest.param(
            {"controlPlane": {"grpcPort": 0}}, r"/controlPlane/grpcPort.*minimum", id="port-0"
        ),
        pytest.param(
            {"exporter": {"port": "9400"}}, r"/exporter/port.*integer", id="port-not-a-number"
        ),
        pytest.param({"routr": {}}, r"additional properties 'routr'", id="unknown-key"),
        pytest.param(
            {"pools": [pool(engine="external", replicas=None)]},
            r"/pools/0",
            id="external-without-endpoints-or-selector",
        ),
        pytest.param(
            {"pools": [pool(selector={"app": "vllm"})]}, r"/pools/0", id="selector-on-a-vllm-pool"
        ),
    ],
)
def test_the_schema_rejects(values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmValuesError, match=message):
        validate_values(values)
    with pytest.raises(HelmValuesError):  # and an install refuses them the same way
        render(values)


@pytest.mark.parametrize(("name", "values"), value_sets(), ids=[n for n, _ in value_sets()])
def test_the_schema_accepts_the_defaults_and_every_ci_set(
    name: str, values: dict[str, Any] | None
) -> None:
    validate_values(values or {})


def test_the_generation_table_is_the_one_in_core() -> None:
    chart_table = merged_values()["generations"]
    assert chart_table == {
        generation.value: {
            "deviceId": spec.device_id,
            "rayAcceleratorType": spec.ray_accelerator_type,
        }
        for generation, spec in GENERATIONS.items()
    }
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert schema["definitions"]["generation"]["enum"] == [g.value for g in Generation]
    assert (chart_table["MI300X"]["deviceId"], chart_table["MI355X"]["deviceId"]) == (
        "74a1",
        "75a3",
    )
