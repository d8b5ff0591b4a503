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

Declared once: these fields are the config keys, the `orchestrator router` flags (`--ttft`,
`--tpot`, `--e2e`, `--class-slo`, through `config/flags.py`; they override the replicas file's
fleet-wide values) and the table in docs/settings.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.config.flags import FlagItems, to_flags
from orchestrator.core.slo import MLPERF_TPOT_S, MLPERF_TTFT_S, ModelTargets, SloTarget, SloTargets

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
CLASS_NAME: Final = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
ClassName = Annotated[str, Field(pattern=CLASS_NAME.pattern)]


def format_class_slo(name: str, target: SloTarget) -> str:
    """`NAME=TTFT/TPOT[/E2E]`, the `--class-slo` syntax."""
    text = f"{name}={_exact(target.ttft_s)}/{_exact(target.tpot_s)}"
    return text if target.e2e_s is None else f"{text}/{_exact(target.e2e_s)}"


def _exact(seconds: float) -> str:
    """The short form where it is exact, else every digit (a flag loses nothing)."""
    short = f"{seconds:g}"
    return short if float(short) == seconds else repr(seconds)


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TargetSpec(_Strict):
    """Some or all of a target's fields; unset ones come from the level above."""

    ttft_s: Seconds | None = Field(default=None, alias="ttftS")
    tpot_s: Seconds | None = Field(default=None, alias="tpotS")
    e2e_s: Seconds | None = Field(default=None, alias="e2eS")

    @classmethod
    def of(cls, target: SloTarget) -> TargetSpec:
        """Every field of `target`, given."""
        return cls.model_validate(
            {"ttft_s": target.ttft_s, "tpot_s": target.tpot_s, "e2e_s": target.e2e_s}
        )

    def over(self, base: SloTarget) -> SloTarget:
        return SloTarget(
            base.ttft_s if self.ttft_s is None else self.ttft_s,
            base.tpot_s if self.tpot_s is None else self.tpot_s,
            base.e2e_s if self.e2e_s is None else self.e2e_s,
        )


class ModelSloSpec(TargetSpec):
    classes: dict[ClassName, TargetSpec] = Field(default_factory=dict)


def _class_entry(raw: str) -> tuple[str, TargetSpec]:
    """One `--class-slo` value: its targets all given (an e2e left out is none)."""
    name, target = parse_class_slo(raw)
    return name, TargetSpec.of(target)


def _class_text(name: str, spec: TargetSpec) -> str:
    if spec.ttft_s is None or spec.tpot_s is None:
        raise ValueError(f"class {name!r}: a flag carries a class's TTFT and TPOT, both")
    return format_class_slo(name, SloTarget(spec.ttft_s, spec.tpot_s, spec.e2e_s))


CLASS_FLAG: Final = FlagItems("NAME=TTFT/TPOT[/E2E]", _class_entry, _class_text)


class SloSpec(_Strict):
    """The whole section; `targets()` resolves it into the router's `SloTargets`."""

    ttft_s: Seconds = Field(
        default=MLPERF_TTFT_S,
        alias="ttftS",
        json_schema_extra={"flag": "--ttft", "metavar": "SECONDS"},
        description="p99 time-to-first-token target of every class without its own, in seconds"
        " on real hardware (MLPerf's Server limit by default)",
    )
    tpot_s: Seconds = Field(
        default=MLPERF_TPOT_S,
        alias="tpotS",
        json_schema_extra={"flag": "--tpot", "metavar": "SECONDS"},
        description="p99 time-per-output-token target of every class without its own, in"
        " seconds (MLPerf's by default)",
    )
    e2e_s: Seconds | None = Field(
        default=None,
        alias="e2eS",
        json_schema_extra={"flag": "--e2e", "metavar": "SECONDS"},
        description="end-to-end target of every class without its own, in seconds",
    )
    classes: Annotated[dict[ClassName, TargetSpec], CLASS_FLAG] = Field(
        default_factory=dict,
        json_schema_extra={"flag": "--class-slo"},
        description="targets of one request class (`interactive`, `batch` or any name), fields"
        " left out from the above; the flag is repeatable, e.g. batch=30/0.2",
    )
    models: dict[Annotated[str, Field(min_length=1)], ModelSloSpec] = Field(
        default_factory=dict,
        json_schema_extra={"flag": False},
        description="per model: its own default and classes (in a replicas file only)",
    )

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
        resolved = self.targets().classes
        classes = {name: TargetSpec.of(resolved[name]) for name in self.classes}
        return to_flags(self.model_copy(update={"classes": classes}))
