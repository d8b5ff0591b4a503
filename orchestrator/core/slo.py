"""Latency targets (SLOs) per model and per request class, and a request's outcome against them.

A target is a p99 TTFT and a p99 TPOT (and optionally an end-to-end time), in seconds. Targets
belong to a *class* of requests: `interactive` and `batch` always exist, an operator may name
more. `SloTargets` answers "which target does a request of this model and class have": the
model's own entry for the class, else the class's fleet-wide target, else the model's default,
else the fleet-wide default (MLPerf's Server limits for gpt-oss-120b: 3 s TTFT, 80 ms TPOT).

Pure values, used by routing (capacity and feasibility against the request's target),
admission, the router's metrics, the fleet model and the benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

MLPERF_TTFT_S: Final = 3.0
MLPERF_TPOT_S: Final = 0.080
INTERACTIVE: Final = "interactive"
BATCH: Final = "batch"
BUILTIN_CLASSES: Final = (INTERACTIVE, BATCH)


class SloOutcome(StrEnum):
    """What one answered request did against its class's target (the `outcome` label)."""

    MET = "met"
    MISSED_TTFT = "missed_ttft"
    MISSED_TPOT = "missed_tpot"
    MISSED_E2E = "missed_e2e"
    FAILED = "failed"  # no whole answer: an upstream error, the deadline, a client gone


@dataclass(frozen=True, slots=True)
class SloTarget:
    """p99 targets in seconds; `e2e_s` None means no end-to-end target."""

    ttft_s: float = MLPERF_TTFT_S
    tpot_s: float = MLPERF_TPOT_S
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            value = getattr(self, name)
            if value is None and name == "e2e_s":
                continue
            if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")

    def scaled(self, factor: float) -> SloTarget:
        """The same target in the wall time of replicas that run `factor` times slower."""
        e2e = None if self.e2e_s is None else self.e2e_s * factor
        return SloTarget(self.ttft_s * factor, self.tpot_s * factor, e2e)

    def outcome(self, *, ttft_s: float | None, tpot_s: float | None, e2e_s: float) -> SloOutcome:
        """The outcome of an answered request; an unmeasured TTFT or TPOT (a non-streamed answer)
        is not held against it, the end-to-end time always is when there is a target."""
        if ttft_s is not None and ttft_s > self.ttft_s:
            return SloOutcome.MISSED_TTFT
        if tpot_s is not None and tpot_s > self.tpot_s:
            return SloOutcome.MISSED_TPOT
        if self.e2e_s is not None and e2e_s > self.e2e_s:
            return SloOutcome.MISSED_E2E
        return SloOutcome.MET


DEFAULT_TARGET: Final = SloTarget()


@dataclass(frozen=True, slots=True)
class ModelTargets:
    """One model's targets: `default` (None: the fleet-wide ones) and per class."""

    default: SloTarget | None = None
    classes: Mapping[str, SloTarget] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SloTargets:
    """Every target the router routes against; look-ups are cached dict hits."""

    default: SloTarget = DEFAULT_TARGET
    classes: Mapping[str, SloTarget] = field(default_factory=dict)
    models: Mapping[str, ModelTargets] = field(default_factory=dict)
    _cache: dict[tuple[str, str], SloTarget] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def target(self, model: str, slo_class: str) -> SloTarget:
        """The target of a request of `model` in `slo_class` (see the module's precedence)."""
        key = (model, slo_class)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._resolve(model, slo_class)
        return found

    def _resolve(self, model: str, slo_class: str) -> SloTarget:
        entry = self.models.get(model)
        if entry is not None and slo_class in entry.classes:
            return entry.classes[slo_class]
        found = self.classes.get(slo_class)
        if found is not None:
            return found
        if entry is not None and entry.default is not None:
            return entry.default
        return self.default

    def class_names(self) -> tuple[str, ...]:
        """The built-in classes, then every class the operator named, sorted."""
        named = set(self.classes)
        for entry in self.models.values():
            named.update(entry.classes)
        return (*BUILTIN_CLASSES, *sorted(named - set(BUILTIN_CLASSES)))

    def scaled(self, factor: float) -> SloTargets:
        """Every target stretched by `factor` (simulated replicas `factor` times slower)."""
        if factor == 1.0:
            return self
        return SloTargets(
            self.default.scaled(factor),
            {k: v.scaled(factor) for k, v in self.classes.items()},
            {
                model: ModelTargets(
                    None if entry.default is None else entry.default.scaled(factor),
                    {k: v.scaled(factor) for k, v in entry.classes.items()},
                )
                for model, entry in self.models.items()
            },
        )

    def with_default(self, ttft_s: float | None, tpot_s: float | None) -> SloTargets:
        """These targets with the default's TTFT and/or TPOT replaced (the router's flags)."""
        if ttft_s is None and tpot_s is None:
            return self
        default = SloTarget(
            self.default.ttft_s if ttft_s is None else ttft_s,
            self.default.tpot_s if tpot_s is None else tpot_s,
            self.default.e2e_s,
        )
        return SloTargets(default, self.classes, self.models)

    def with_classes(self, classes: Mapping[str, SloTarget]) -> SloTargets:
        """These targets with `classes` set fleet-wide (over the same names)."""
        if not classes:
            return self
        merged = {**self.classes, **classes}
        return SloTargets(self.default, merged, self.models)

    def rows(self, models: tuple[str, ...] = ()) -> list[tuple[str, str, SloTarget]]:
        """(model or "*", class, target) for display: the fleet-wide ones, then each model's."""
        out = [("*", name, self.target("", name)) for name in self.class_names()]
        for model in sorted({*self.models, *models}):
            if model in self.models:
                out.extend((model, name, self.target(model, name)) for name in self.class_names())
        return out
