"""The control plane's config the chart renders is read by the loader `orchestrator up` and
`orchestrator control-plane` use: render, extract, parse; so the chart cannot drift from it."""

from __future__ import annotations

from typing import Any

import pytest
from chart import merged_values, render, value_sets

from orchestrator.config import parse_config
from orchestrator.core.generations import parse_generation
from orchestrator.core.records import EngineKind


@pytest.mark.parametrize(("name", "values"), value_sets(), ids=[n for n, _ in value_sets()])
def test_the_rendered_config_is_loaded_by_the_config_loader(
    name: str, values: dict[str, Any] | None
) -> None:
    rendered = render(values)
    config_map = rendered.named("ConfigMap", "llm-orchestrator-config")
    config = parse_config(config_map["data"]["config.yaml"], source=f"{name} config.yaml")

    merged = merged_values(values)
    pools = merged["pools"]
    assert set(config.sites) == set(merged["sites"])
    assert [p.name for p in config.pools] == [p["name"] for p in pools]
    for spec, given in zip(config.pools, pools, strict=True):
        assert spec.site == given["site"]
        assert spec.generation is parse_generation(given["generation"])
        assert spec.engine is EngineKind(given["engine"])
        if spec.engine is EngineKind.EXTERNAL:
            assert spec.endpoints == tuple(given.get("endpoints", ()))
            assert spec.selector == given.get("selector")
            assert spec.port == given.get("port")
        else:
            assert spec.replicas == given["replicas"]
            assert spec.gpus_per_replica == given.get("gpusPerReplica", 1)
            assert spec.engine_args == tuple(given.get("engineArgs", ()))
    assert config.router.http_port == merged["router"]["httpPort"]
    assert config.router.profile == merged["router"]["profile"]
    assert config.control_plane.grpc_port == merged["controlPlane"]["grpcPort"]
    assert config.exporters.port == merged["exporter"]["port"]
    spec = rendered.named("Deployment", "llm-orchestrator-control-plane")["spec"]["template"][
        "spec"
    ]
    (container,) = spec["containers"]
    assert "--config=/etc/orchestrator/config.yaml" in container["args"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/orchestrator"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
