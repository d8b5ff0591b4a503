"""The `slo:` section (orchestrator config `router.slo`, and the replicas file's top level):
the latency targets the router routes against, per model and per request class.

    slo:
      ttftS: 3.0                  # default p99 TTFT, seconds (MLPerf's Server limit)
      tpotS: 0.08                 # default p99 TPOT, seconds
      e2eS: 600                   # optional end-to-end target
      classes:                    # `interactive`, `batch`, or any name a request may give
        interactive: {ttftS: 1.0, tpotS: 0.05}
        batch: {ttftS: 30, tpotS: 0.2}
      models:                     # per model: its own default and classes
        openai/gpt-oss-20b: {tpotS: 0.03, classes: {batch: {ttftS: 60}}}

A class or model entry may leave out a field: it takes it from the level above (a model's class
from the model, then from the fleet-wide class, then from the default). Targets are seconds on
the real hardware; a router in front of slowed-down simulated replicas stretches them by its
`latencyScale`.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.slo import MLPERF_TPOT_S, MLPERF_TTFT_S, ModelTargets, SloTarget, SloTargets

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
CLASS_NAME: Final = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
ClassName = Annotated[str, Field(pattern=CLASS_NAME.pattern)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TargetSpec(_Strict):
    """Some or all of a target's fields; unset ones come from the level above."""

    ttft_s: Seconds | None = Field(default=None, alias="ttftS")
    tpot_s: Seconds | None = Field(default=None, alias="tpotS")
    e2e_s: Seconds | None = Field(default=None, alias="e2eS")

    def over(self, base: SloTarget) -> SloTarget:
        return SloTarget(
            base.ttft_s if self.ttft_s is None else self.ttft_s,
            base.tpot_s if self.tpot_s is None else self.tpot_s,
            base.e2e_s if self.e2e_s is None else self.e2e_s,
        )


class ModelSloSpec(TargetSpec):
    classes: dict[ClassName, TargetSpec] = Field(default_factory=dict)


class SloSpec(_Strict):
    """The whole section; `targets()` resolves it into the router's `SloTargets`."""

    ttft_s: Seconds = Field(default=MLPERF_TTFT_S, alias="ttftS")
    tpot_s: Seconds = Field(default=MLPERF_TPOT_S, alias="tpotS")
    e2e_s: Seconds | None = Field(default=None, alias="e2eS")
    classes: dict[ClassName, TargetSpec] = Field(default_factory=dict)
    models: dict[Annotated[str, Field(min_length=1)], ModelSloSpec] = Field(default_factory=dict)

    def targets(self) -> SloTargets:
        default = SloTarget(self.ttft_s, self.tpot_s, self.e2e_s)
        classes = {name: spec.over(default) for name, spec in self.classes.items()}
        models = {}
        for model, entry in self.models.items():
            model_default = entry.over(default)
            model_classes = {
                name: spec.over(entry.over(classes.get(name, default)))
                for name, spec in entry.classes.items()
            }
            models[model] = ModelTargets(model_default, model_classes)
        return SloTargets(default, classes, models)

    def router_flags(self) -> list[str]:
        """`orchestrator router` flags carrying the fleet-wide targets (what `up` passes)."""
        if self.models:
            raise ValueError("per-model targets travel in a replicas file, not as router flags")
        flags = ["--ttft", str(self.ttft_s), "--tpot", str(self.tpot_s)]
        if self.e2e_s is not None:
            flags += ["--e2e", str(self.e2e_s)]
        targets = self.targets()
        for name in sorted(self.classes):
            flags += ["--class-slo", format_class_slo(name, targets.classes[name])]
        return flags


def format_class_slo(name: str, target: SloTarget) -> str:
    """`NAME=TTFT/TPOT[/E2E]`, the `--class-slo` syntax."""
    text = f"{name}={target.ttft_s:g}/{target.tpot_s:g}"
    return text if target.e2e_s is None else f"{text}/{target.e2e_s:g}"


def parse_class_slo(raw: str) -> tuple[str, SloTarget]:
    """Parse `NAME=TTFT/TPOT[/E2E]` (seconds); raises ValueError saying what is wrong."""
    name, sep, numbers = raw.partition("=")
    if not sep or not CLASS_NAME.match(name):
        raise ValueError(
            "expected NAME=TTFT/TPOT[/E2E], NAME of lower-case letters, digits, - or _,"
            f" got {raw!r}"
        )
    parts = numbers.split("/")
    if len(parts) not in (2, 3):
        raise ValueError(f"expected NAME=TTFT/TPOT[/E2E] in seconds, got {raw!r}")
    try:
        values = [float(part) for part in parts]
        target = SloTarget(values[0], values[1], values[2] if len(values) == 3 else None)
    except ValueError as error:
        raise ValueError(f"{raw!r}: {error}") from None
    return name, target
