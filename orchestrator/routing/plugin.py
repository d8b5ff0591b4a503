"""The plugin contracts: filters narrow the candidates, scorers rate them in [0, 1], a picker
chooses a primary and ordered fallbacks.

Each plugin lives in its own module under `routing/plugins/`, has a `TYPE` name, a
`from_params(name, params)` factory, and a docstring that states its formula. Plugins are
synchronous and pure over what they are given.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from orchestrator.core.records import Replica
from orchestrator.routing.context import RequestContext
from orchestrator.routing.views import Candidate, Decision, RoutingView

__all__ = [  # the records live in a compiled module; plugins import them from here
    "Candidate",
    "Decision",
    "RoutingView",
]


@runtime_checkable
class Filter(Protocol):
    TYPE: ClassVar[str]
    name: str

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> Sequence[Candidate]: ...


@runtime_checkable
class Scorer(Protocol):
    TYPE: ClassVar[str]
    name: str

    def score(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[float]:
        """One score in [0, 1] per candidate, in the candidates' order."""
        ...


@runtime_checkable
class UtilisationScorer(Scorer, Protocol):
    """Optional, for scorers: rate candidates from their utilisations ρ, computed by the caller.

    ρ is `signals.utilisations(candidates, view.target_tpot_s, degraded_capacity_factor)`, the
    same for every scorer with the same factor, so a profile with several such scorers (the
    default one has two to four) computes it once per decision and hands each the same list,
    which they only read. `score(ctx, view, candidates)` must equal
    `score_utilised(ctx, view, candidates, ρ)`: `plugins.scorers.utilised.RatesByUtilisation`
    gives that `score()`.
    """

    degraded_capacity_factor: float

    def score_utilised(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        rhos: Sequence[float],
    ) -> list[float]: ...


@runtime_checkable
class Picker(Protocol):
    TYPE: ClassVar[str]
    name: str

    def pick(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        scores: Sequence[float],
        *,
        limit: int | None = None,
    ) -> list[Candidate]:
        """Candidates in the order to try them: the first is the primary.

        `candidates` is never empty. At most `limit` are returned (all when None), so a picker
        need not order candidates nobody will try.
        """
        ...


@runtime_checkable
class RequestIndependentFilter(Filter, Protocol):
    """Optional: a filter whose result depends on the request only through its model.

    It reads the table, the replicas' state and health, their circuit breakers and last scraped
    load, but nothing else of the request, so a profile may reuse its result for every request for
    the same model, table version and time bucket (see `Profile`). `REQUEST_INDEPENDENT` says
    whether that is allowed.
    """

    REQUEST_INDEPENDENT: ClassVar[bool]


@runtime_checkable
class PrimaryOnlyFilter(Filter, Protocol):
    """Optional: a filter that narrows where the primary goes, not where fallbacks come from.

    A preference rather than a condition of serving: when the preferred replicas fail before a
    token (refused, 5xx) or a stream must move, any other candidate is better than none. The
    profile picks the primary (and fallbacks, while they last) from what the filter left, then
    the remaining fallbacks from what it was given. `PRIMARY_ONLY` says whether that is allowed.
    """

    PRIMARY_ONLY: ClassVar[bool]


@runtime_checkable
class Nominator(Protocol):
    """Optional, for scorers: name the few eligible candidates this scorer would rate highest.

    Called only when a profile scores a sample of the eligible candidates rather than all of them,
    so that the sample still holds what this scorer prefers (the prefix's home replica, a local
    replica). Must be sublinear in `len(eligible)`; `eligible` is a tuple that is not mutated, so
    per-list work may be cached by its identity.
    """

    def nominate(
        self, ctx: RequestContext, view: RoutingView, eligible: Sequence[Candidate]
    ) -> Sequence[Candidate]: ...


@runtime_checkable
class WholeSetPicker(Picker, Protocol):
    """Optional: a picker that ignores scores and must see every eligible candidate.

    Round robin's cycle and weighted random's distribution are defined over the whole eligible
    set; such a picker is sublinear on its own (it caches per eligible tuple), so the profile hands
    it the whole set, unsampled and unscored. `WHOLE_SET` says whether it wants that.
    """

    WHOLE_SET: ClassVar[bool]


@runtime_checkable
class RequestObserver(Protocol):
    """Optional: a plugin that wants to know where requests went (prefix affinity, round robin)."""

    def on_routed(self, ctx: RequestContext, replica: Replica) -> None: ...


@runtime_checkable
class Seeded(Protocol):
    """Optional: a plugin that draws at random (a tie-break, a sample, nominees). Router processes
    sharing a fleet each build the same profile with the same seeds; `reseed` mixes a process's
    identity in (`Profile.reseed`), so they do not draw in lockstep and send their next requests
    to the same replica on the same table."""

    def reseed(self, salt: int) -> None: ...


def salt_rng(rng: random.Random, salt: int) -> None:
    """Reseed `rng` from its configured state and `salt`: the same seed and salt draw the same
    sequence (tests stay reproducible), another salt another one."""
    rng.seed(hash((rng.getrandbits(64), salt)))


PluginParams = Mapping[str, Any]
