"""Render the chart with Helm's own engine (helm-python-sdk) and hand tests plain objects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "orchestrator"
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "llm"
NAMESPACE = "inference"
CRD_KINDS = frozenset(
    {"RayCluster", "ServiceMonitor", "PodMonitor", "PrometheusRule", "ScrapeConfig"}
)
POD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet"})


@dataclass(frozen=True)
class Rendered:
    """One render: the manifests by template path, parsed, and the NOTES text."""

    objects: tuple[dict[str, Any], ...]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def named(self, kind: str, name: str) -> dict[str, Any]:
        matches = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        assert len(matches) == 1, f"{kind}/{name}: {len(matches)} rendered"
        return matches[0]

    def pod_templates(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every pod template rendered: workloads' and the RayCluster's head and worker groups."""
        for obj in self.objects:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            if obj["kind"] in POD_KINDS:
                yield name, obj["spec"]["template"]
            elif obj["kind"] == "RayCluster":
                yield f"{name} head", obj["spec"]["headGroupSpec"]["template"]
                for group in obj["spec"].get("workerGroupSpecs", ()):
                    yield f"{name} {group['groupName']}", group["template"]


def values_file(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded or {}


@cache
def _chart() -> helm.Chart:
    return helm.Chart.load(str(CHART))


def render(values: Mapping[str, Any] | None = None) -> Rendered:
    """Render like `helm install llm -n inference`; raises `helm.HelmError` on bad values."""
    manifests = _chart().render(
        values=dict(values) if values is not None else None,
        name=RELEASE,
        namespace=NAMESPACE,
        is_install=True,
    )
    objects: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return Rendered(tuple(objects), notes)


def merged_values(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return _chart().merge_values(dict(values) if values is not None else None)


def validate_values(values: Mapping[str, Any]) -> None:
    """Check values (merged with the defaults, as an install does) against values.schema.json."""
    _chart().validate_schema(merged_values(values))


def lint(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return helm.lint(str(CHART), dict(values) if values is not None else None, namespace=NAMESPACE)


def value_sets() -> list[tuple[str, dict[str, Any] | None]]:
    """The defaults, then every ci/ file: (id, values)."""
    return [("defaults", None), *((path.stem, values_file(path)) for path in CI_FILES)]
