"""The plugin contracts: filters narrow the candidates, scorers rate them in [0, 1], a picker
chooses a primary and ordered fallbacks.

Each plugin lives in its own module under `routing/plugins/`, has a `TYPE` name, a
`from_params(name, params)` factory, and a docstring that states its formula. Plugins are
synchronous and pure over what they are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from orchestrator.core.records import Replica
from orchestrator.routing.context import RequestContext
from orchestrator.routing.stats import ReplicaStats
from orchestrator.table.snapshot import RoutingTable


@dataclass(frozen=True, slots=True)
class Candidate:
    """A replica with its live stats, as plugins see it."""

    replica: Replica
    stats: ReplicaStats


@dataclass(frozen=True, slots=True)
class RoutingView:
    """What a decision may consult beyond the candidates: the table and the latency targets.

    Targets are in wall-clock seconds (already scaled for slowed-down simulated fleets).
    """

    table: RoutingTable
    target_ttft_s: float
    target_tpot_s: float
    now_s: float


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes: `primary`, then `fallbacks` in order if it fails before a token."""

    primary: Replica
    fallbacks: tuple[Replica, ...]
    profile: str


@runtime_checkable
class Filter(Protocol):
    TYPE: ClassVar[str]
    name: str

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]: ...


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
class Picker(Protocol):
    TYPE: ClassVar[str]
    name: str

    def pick(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        scores: Sequence[float],
    ) -> list[Candidate]:
        """Candidates in the order to try them: the first is the primary."""
        ...


@runtime_checkable
class RequestObserver(Protocol):
    """Optional: a plugin that wants to know where requests went (prefix affinity, round robin)."""

    def on_routed(self, ctx: RequestContext, replica: Replica) -> None: ...


PluginParams = Mapping[str, Any]
