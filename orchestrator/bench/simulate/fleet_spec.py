"""What `--fleet`, `--profile` and `--prior` name: parsed once, errors saying what is allowed.

--fleet MI355X:16,MI300X:16
--profile capacity | round-robin | least-requests | power-of-two
          | weighted-static:MI355X=4.5,MI300X=1
--prior calibrated | equal
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.bench.virtual_fleet import ReplicaSpec
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation, parse_generation
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.routing.profile import Profile
from orchestrator.routing.profiles import builtin_profiles, load_profiles

SITE = "local"
WEIGHTED_STATIC = "weighted-static"
COMPARED_PROFILES = ("capacity", "round-robin", "least-requests", "power-of-two")


class Prior(StrEnum):
    """Where each replica's capacity prior comes from.

    `calibrated`: the fleet model's Server capacity of its generation. `equal`: every replica
    gets the fleet's mean of those, so generations look alike and the estimator has to learn.
    """

    CALIBRATED = "calibrated"
    EQUAL = "equal"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    generation: Generation
    replicas: int

    @property
    def label(self) -> str:
        return f"{self.generation.value}:{self.replicas}"


@dataclass(frozen=True, slots=True)
class FleetSpec:
    pools: tuple[PoolSpec, ...]

    @property
    def replicas(self) -> int:
        return sum(p.replicas for p in self.pools)

    @property
    def label(self) -> str:
        return ",".join(p.label for p in self.pools)

    def pool_name(self, generation: Generation) -> str:
        """The pool name the virtual fleet gives a generation's replicas."""
        return f"{SITE}-{generation.value.lower()}"


def _invalid(message: str, param: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, message, param=param)


def parse_fleet(text: str) -> FleetSpec:
    """`GEN:N[,GEN:N...]`, each generation once, N ≥ 1."""
    pools: list[PoolSpec] = []
    for part in (p.strip() for p in text.split(",")):
        name, colon, count = part.partition(":")
        if not part or not colon:
            raise _invalid(
                f"--fleet: expected GENERATION:REPLICAS[,...] (e.g. MI355X:16,MI300X:16), "
                f"got {text!r}",
                "fleet",
            )
        try:
            generation = parse_generation(name)
        except OrchestratorError as error:
            raise _invalid(f"--fleet: {error.message}", "fleet") from None
        if not count.strip().isdigit() or int(count) < 1:
            raise _invalid(
                f"--fleet: replicas of {name} must be a whole number >= 1, got {count!r}", "fleet"
            )
        if any(p.generation is generation for p in pools):
            raise _invalid(f"--fleet: {generation.value} is listed twice", "fleet")
        pools.append(PoolSpec(generation, int(count)))
    return FleetSpec(tuple(pools))


def parse_prior(text: str) -> Prior:
    try:
        return Prior(text)
    except ValueError:
        allowed = ", ".join(p.value for p in Prior)
        raise _invalid(f"--prior: expected one of {allowed}, got {text!r}", "prior") from None


def replica_specs(fleet: FleetSpec, prior: Prior) -> list[ReplicaSpec]:
    """One spec per replica, ids `<generation>-<index>`, priors as `prior` says."""
    figures = load_figures()
    calibrated = {
        p.generation: capacity_prior_tokens_per_s(figures, p.generation) for p in fleet.pools
    }
    mean = sum(calibrated[p.generation] * p.replicas for p in fleet.pools) / fleet.replicas
    specs = []
    for pool in fleet.pools:
        value = calibrated[pool.generation] if prior is Prior.CALIBRATED else mean
        for index in range(pool.replicas):
            replica_id = f"{pool.generation.value.lower()}-{index:04d}"
            specs.append(ReplicaSpec(replica_id, pool.generation, value, site=SITE))
    return specs


def check_profile(text: str) -> str:
    """Validate a `--profile` value (building it once) and return it unchanged."""
    build_profile(text)
    return text


def build_profile(text: str) -> Profile:
    """A fresh profile instance: built-in by name, or `weighted-static:GEN=W,...`."""
    name, colon, weights = text.partition(":")
    if name == WEIGHTED_STATIC and colon:
        return _weighted_static(weights)
    profiles = builtin_profiles()
    if text not in profiles or (text == WEIGHTED_STATIC):
        known = ", ".join(sorted(n for n in profiles if n != WEIGHTED_STATIC))
        raise _invalid(
            f"--profile: unknown profile {text!r}; known: {known}, "
            f"{WEIGHTED_STATIC}:GEN=WEIGHT[,GEN=WEIGHT...]",
            "profile",
        )
    return profiles[text]


def _weighted_static(text: str) -> Profile:
    pairs: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        name, equals, weight = part.partition("=")
        try:
            generation = parse_generation(name)
            value = float(weight)
        except (OrchestratorError, ValueError):
            generation, value = None, float("nan")
        if not equals or generation is None or not value > 0:
            raise _invalid(
                f"--profile: {WEIGHTED_STATIC} expects GEN=WEIGHT pairs with weights > 0 "
                f"(e.g. {WEIGHTED_STATIC}:MI355X=4.5,MI300X=1), got {part!r}",
                "profile",
            )
        pairs.append(f"{SITE}-{generation.value.lower()}: {value}")
    document = (
        "apiVersion: orchestrator/v1alpha1\nkind: RoutingProfiles\nprofiles:\n"
        f"  - name: {WEIGHTED_STATIC}\n"
        "    filters: [{type: model-served}, {type: healthy}, {type: not-draining}]\n"
        f"    picker: {{type: weighted-random, params: {{weights: {{{', '.join(pairs)}}}}}}}\n"
    )
    return load_profiles(document, source="--profile")[WEIGHTED_STATIC]
