"""A routing profile: filters, weighted scorers and a picker, run in that order.

    decision = picker(candidates after filters, sum_i weight_i * score_i / sum_i weight_i)

Filters are hard unless marked soft: a soft filter that would leave no candidate is skipped
(fail open), so a signal that condemns every replica narrows nothing.

What a profile is (`ProfileSpec`: its steps, limits and seed) is frozen data; what it keeps
between decisions (its random source, its filter cache) lives in the `Profile` that runs it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import (
    Candidate,
    Decision,
    Filter,
    Nominator,
    Picker,
    PrimaryOnlyFilter,
    RequestIndependentFilter,
    RequestObserver,
    RoutingView,
    Scorer,
    Seeded,
    UtilisationScorer,
    WholeSetPicker,
    salt_rng,
)
from orchestrator.routing.sampling import sample
from orchestrator.routing.signals import utilisations

MAX_FALLBACKS = 3
DEFAULT_SAMPLE_SIZE = 8
ELIGIBLE_BUCKET_S = 0.2  # how long a request-independent filter result may be reused
_ELIGIBLE_ENTRIES = 16  # cached filter results kept (models × buckets × candidate lists)


@dataclass(frozen=True, slots=True)
class FilterStep:
    plugin: Filter
    soft: bool = False


@dataclass(frozen=True, slots=True)
class ScorerStep:
    plugin: Scorer
    weight: float


class NoCandidateError(OrchestratorError):
    """Every replica was filtered out; `code` tells whether the model is unknown or just down."""


@dataclass(frozen=True, slots=True)
class _Eligible:
    """Cached filters' result for one candidate list: survivors, or the filter that left none."""

    source: Sequence[Candidate]
    survivors: tuple[Candidate, ...]
    excluded_by: str | None


class _DecisionState:
    """What a profile keeps between decisions: its random source and its filter cache; and what
    it works out once from its steps (how many filters are cached, which plugins nominate,
    observe, or share the utilisations)."""

    __slots__ = (
        "cached_filters",
        "entries",
        "latest",
        "nominators",
        "observers",
        "primary_only",
        "rng",
        "scoring",
        "whole_set",
    )

    def __init__(self, profile: ProfileSpec) -> None:
        self.rng = random.Random(profile.seed)
        picker = profile.picker
        self.whole_set = isinstance(picker, WholeSetPicker) and picker.WHOLE_SET
        self.cached_filters = 0
        for step in profile.filters:
            plugin = step.plugin
            if not (isinstance(plugin, RequestIndependentFilter) and plugin.REQUEST_INDEPENDENT):
                break
            if _primary_only(plugin):
                break
            self.cached_filters += 1
        self.primary_only = tuple(_primary_only(step.plugin) for step in profile.filters)
        self.nominators = tuple(
            s.plugin for s in profile.scorers if isinstance(s.plugin, Nominator)
        )
        # (scorer, weight, the same scorer when it takes shared utilisations, else None)
        self.scoring: tuple[tuple[Scorer, float, UtilisationScorer | None], ...] = tuple(
            (s.plugin, s.weight, s.plugin if isinstance(s.plugin, UtilisationScorer) else None)
            for s in profile.scorers
        )
        self.observers = tuple(
            p
            for p in (*(s.plugin for s in profile.scorers), profile.picker)
            if isinstance(p, RequestObserver)
        )
        self.entries: dict[tuple[str, int, int, int], _Eligible] = {}
        self.latest: dict[str, tuple[Candidate, ...]] = {}


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """A routing profile as data: filters, weighted scorers, a picker, and the limits and seed
    `Profile` decides with; refused at construction when they do not go together. The plugins
    keep state of their own (a round-robin position, a hash ring's cache), so each router
    builds its own spec (`builtin_profiles` returns fresh ones)."""

    name: str
    filters: tuple[FilterStep, ...]
    scorers: tuple[ScorerStep, ...]
    picker: Picker
    max_fallbacks: int = MAX_FALLBACKS
    sample_size: int = DEFAULT_SAMPLE_SIZE
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sample_size < 1:
            raise ValueError(f"profile `{self.name}`: sample_size must be at least 1")
        if self.max_fallbacks < 0:
            raise ValueError(f"profile `{self.name}`: max_fallbacks must not be negative")
        whole_set = isinstance(self.picker, WholeSetPicker) and self.picker.WHOLE_SET
        if self.scorers and whole_set:
            raise ValueError(
                f"profile `{self.name}`: scorers: picker `{self.picker.TYPE}` ignores scores, "
                "so a profile using it has no scorers"
            )


class Profile:
    """Filters, then weighted scorers, then a picker; cost nearly flat in the fleet's size.

    Two things keep a decision's cost from growing with the number of replicas:

    1. Cached filtering. The leading filters that are request-independent (they read the request
       only for its model: `model-served`, `healthy`, `not-draining`, `kv-headroom`,
       `fabric-healthy`, `site-allowed`), soft ones included, run once per (model, table
       version, 0.2 s bucket of `view.now_s`, identity of the candidate list) and their survivors
       are reused as one tuple; a later bucket that finds the same survivors reuses the same tuple
       too, so plugins' per-tuple caches (hash ring, weights) stay warm. A circuit that opens or a
       scrape that lands is therefore seen within 0.2 s; a table change at once. Callers pass the
       same candidate list for as long as the table is unchanged (`FleetState.candidates`) and
       never mutate it. Filters after the first request-dependent one run on every request.

    2. Power-of-k choices. When more than `sample_size` candidates survive, the scorers rate only
       `sample_size` of them drawn uniformly at random, plus those the scorers nominate
       (`Nominator`: `prefix-affinity` names the prefix's replicas on its hash ring,
       `site-locality` a few local replicas), and the picker chooses among those. Sampling
       k ≥ 2 candidates and taking the least utilised keeps utilisation even across the fleet
       (Mitzenmacher's power of d choices), so capacity-proportional shares survive sampling.
       With at most `sample_size` survivors, every one is scored: the decision is exact.

    A `WholeSetPicker` (round robin, weighted random) sees every survivor, unsampled and
    unscored, so such a profile has no scorers. Randomness comes from `random.Random(seed)`;
    router processes sharing a fleet must not draw in lockstep, so each mixes its identity into
    the seeds (`reseed`).
    """

    __slots__ = ("_state", "spec")

    def __init__(self, spec: ProfileSpec) -> None:
        self.spec = spec
        self._state = _DecisionState(spec)

    @property
    def name(self) -> str:
        return self.spec.name

    def reseed(self, salt: int) -> None:
        """Mix `salt` (a router process's identity) into the sampling's seed and each drawing
        plugin's (`Seeded`): routers built from one profile file then break ties and sample apart
        instead of all sending their next request to the same replica of the same table."""
        salt_rng(self._state.rng, salt)
        spec = self.spec
        for plugin in (*(f.plugin for f in spec.filters), *(s.plugin for s in spec.scorers)):
            if isinstance(plugin, Seeded):
                plugin.reseed(salt)
        if isinstance(spec.picker, Seeded):
            spec.picker.reseed(salt)

    def decide(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> Decision:
        """Choose a primary and fallbacks, or raise `NoCandidateError`.

        Fallbacks come from the same survivors, then, when a `PrimaryOnlyFilter` narrowed them
        and they run out, from the survivors before it (ranked the same way)."""
        eligible, wider = self._eligible(ctx, view, candidates)
        limit = 1 + self.spec.max_fallbacks
        ordered = self._ordered(ctx, view, eligible, limit)
        if wider is not None and len(ordered) < limit:
            chosen = {id(c.replica) for c in ordered}
            more = self._ordered(ctx, view, wider, limit + len(ordered))
            ordered += [c for c in more if id(c.replica) not in chosen][: limit - len(ordered)]
        primary = ordered[0].replica
        for observer in self._state.observers:
            observer.on_routed(ctx, primary)
        fallbacks = tuple([c.replica for c in ordered[1:limit]])
        return Decision(primary=primary, fallbacks=fallbacks, profile=self.spec.name)

    def _ordered(
        self, ctx: RequestContext, view: RoutingView, eligible: Sequence[Candidate], limit: int
    ) -> list[Candidate]:
        """The picker's order over `eligible` (sampled and scored unless it wants the set)."""
        if self._state.whole_set:
            return self.spec.picker.pick(ctx, view, eligible, [0.0] * len(eligible), limit=limit)
        scored = eligible
        if len(eligible) > self.spec.sample_size:
            scored = self._sample(ctx, view, eligible)
        scores = self._combined_scores(ctx, view, scored)
        return self.spec.picker.pick(ctx, view, scored, scores, limit=limit)

    def _eligible(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> tuple[Sequence[Candidate], Sequence[Candidate] | None]:
        """The survivors, and those before the first primary-only filter that narrowed them
        (None if none did), the later filters applied to both."""
        state = self._state
        key = (
            ctx.model,
            view.table.version,
            math.floor(view.now_s / ELIGIBLE_BUCKET_S),
            id(candidates),
        )
        entry = state.entries.get(key)
        if entry is None or entry.source is not candidates:
            entry = self._run_cached_filters(ctx, view, candidates)
            state.entries[key] = entry
            if len(state.entries) > _ELIGIBLE_ENTRIES:
                del state.entries[next(iter(state.entries))]
        if entry.excluded_by is not None:
            raise self._nothing_left(ctx, candidates, entry.excluded_by)
        remaining: Sequence[Candidate] = entry.survivors
        wider: Sequence[Candidate] | None = None
        start = state.cached_filters
        for index, step in enumerate(self.spec.filters[start:], start):
            narrowed = step.plugin.filter(ctx, view, remaining)
            if not narrowed and step.soft:
                narrowed = remaining
            if not narrowed:
                raise self._nothing_left(ctx, candidates, step.plugin.name)
            if state.primary_only[index]:
                if wider is None and narrowed is not remaining:
                    wider = remaining
            elif wider is not None:
                wider = step.plugin.filter(ctx, view, wider) or (wider if step.soft else narrowed)
            remaining = narrowed
        return remaining, wider

    def _run_cached_filters(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> _Eligible:
        remaining: Sequence[Candidate] = candidates
        for step in self.spec.filters[: self._state.cached_filters]:
            narrowed = step.plugin.filter(ctx, view, remaining)
            if narrowed or not step.soft:
                remaining = narrowed
            if not remaining:
                return _Eligible(candidates, (), step.plugin.name)
        survivors = tuple(remaining)
        previous = self._state.latest.get(ctx.model)
        if previous is not None and _same(previous, survivors):
            survivors = previous
        self._state.latest[ctx.model] = survivors
        return _Eligible(candidates, survivors, None)

    def _sample(
        self, ctx: RequestContext, view: RoutingView, eligible: Sequence[Candidate]
    ) -> list[Candidate]:
        chosen = sample(self._state.rng, eligible, self.spec.sample_size)
        seen: set[int] | None = None  # built at the first nominee: often there is none
        for nominator in self._state.nominators:
            for candidate in nominator.nominate(ctx, view, eligible):
                if seen is None:
                    seen = {id(c) for c in chosen}
                if id(candidate) not in seen:
                    seen.add(id(candidate))
                    chosen.append(candidate)
        return chosen

    def _combined_scores(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[float]:
        """Σ weight × clamp(score, 0, 1) / Σ weight, each scorer's terms added in profile order.

        Scorers that rate by utilisation (`UtilisationScorer`) share one ρ list per decision.
        """
        count = len(candidates)
        total = [0.0] * count
        weights = 0.0
        rhos: list[float] = []
        rhos_factor = math.nan  # the degraded-capacity factor `rhos` was computed at
        for plugin, weight, by_utilisation in self._state.scoring:
            weights += weight
            if by_utilisation is None:
                values = plugin.score(ctx, view, candidates)
            else:
                factor = by_utilisation.degraded_capacity_factor
                if factor != rhos_factor:
                    rhos = utilisations(candidates, view.target_tpot_s, factor)
                    rhos_factor = factor
                values = by_utilisation.score_utilised(ctx, view, candidates, rhos)
            if len(values) != count:
                raise ValueError(
                    f"scorer `{plugin.name}` gave {len(values)} scores for {count} candidates"
                )
            # a loop, not a comprehension per scorer: about half the cost on CPython 3.11
            for index, value in enumerate(values):
                # min(1.0, max(0.0, value)) without the calls (NaN clamps to 0.0 either way)
                total[index] += weight * (1.0 if value > 1.0 else value if value > 0.0 else 0.0)
        return [value / weights for value in total] if weights > 0 else total

    @staticmethod
    def _nothing_left(
        ctx: RequestContext, candidates: Sequence[Candidate], filter_name: str
    ) -> NoCandidateError:
        if not any(c.replica.model == ctx.model for c in candidates):
            return NoCandidateError(
                ErrorCode.NOT_FOUND, f"The model `{ctx.model}` does not exist.", param="model"
            )
        return NoCandidateError(
            ErrorCode.UNAVAILABLE,
            f"no replica of `{ctx.model}` can take the request now ({filter_name} excluded all)",
        )


def _primary_only(plugin: Filter) -> bool:
    return isinstance(plugin, PrimaryOnlyFilter) and plugin.PRIMARY_ONLY


def _same(a: tuple[Candidate, ...], b: tuple[Candidate, ...]) -> bool:
    """Same replicas with the same live stats, even if the `Candidate` wrappers were rebuilt."""
    return len(a) == len(b) and all(
        x.replica is y.replica and x.stats is y.stats for x, y in zip(a, b, strict=True)
    )
