"""The built-in routing plugins, one per module, and the registry that names them for YAML.
Part of `routing/` (layer 5, pure).
"""

from __future__ import annotations

from orchestrator.routing.plugins.filters.fabric_healthy import FabricHealthyFilter
from orchestrator.routing.plugins.filters.healthy import HealthyFilter
from orchestrator.routing.plugins.filters.kv_headroom import KvHeadroomFilter
from orchestrator.routing.plugins.filters.load_known import LoadKnownFilter
from orchestrator.routing.plugins.filters.model_served import ModelServedFilter
from orchestrator.routing.plugins.filters.not_draining import NotDrainingFilter
from orchestrator.routing.plugins.filters.site_allowed import SiteAllowedFilter
from orchestrator.routing.plugins.filters.slo_reserved import SloReservedFilter
from orchestrator.routing.plugins.pickers.max_score import MaxScorePicker
from orchestrator.routing.plugins.pickers.power_of_two import PowerOfTwoPicker
from orchestrator.routing.plugins.pickers.round_robin import RoundRobinPicker
from orchestrator.routing.plugins.pickers.weighted_random import WeightedRandomPicker
from orchestrator.routing.plugins.scorers.capacity_headroom import CapacityHeadroomScorer
from orchestrator.routing.plugins.scorers.latency_slo import LatencySloScorer
from orchestrator.routing.plugins.scorers.least_requests import LeastRequestsScorer
from orchestrator.routing.plugins.scorers.prefix_affinity import PrefixAffinityScorer
from orchestrator.routing.plugins.scorers.site_locality import SiteLocalityScorer
from orchestrator.routing.registry import PluginRegistry

__all__ = [
    "CapacityHeadroomScorer",
    "FabricHealthyFilter",
    "HealthyFilter",
    "KvHeadroomFilter",
    "LatencySloScorer",
    "LeastRequestsScorer",
    "LoadKnownFilter",
    "MaxScorePicker",
    "ModelServedFilter",
    "NotDrainingFilter",
    "PowerOfTwoPicker",
    "PrefixAffinityScorer",
    "RoundRobinPicker",
    "SiteAllowedFilter",
    "SiteLocalityScorer",
    "SloReservedFilter",
    "WeightedRandomPicker",
    "builtin_registry",
]


def builtin_registry() -> PluginRegistry:
    """A registry holding every built-in plugin type (a fresh one per call: nothing global)."""
    registry = PluginRegistry()
    registry.register(ModelServedFilter.TYPE, ModelServedFilter.from_params)
    registry.register(HealthyFilter.TYPE, HealthyFilter.from_params)
    registry.register(NotDrainingFilter.TYPE, NotDrainingFilter.from_params)
    registry.register(KvHeadroomFilter.TYPE, KvHeadroomFilter.from_params)
    registry.register(FabricHealthyFilter.TYPE, FabricHealthyFilter.from_params)
    registry.register(LoadKnownFilter.TYPE, LoadKnownFilter.from_params)
    registry.register(SiteAllowedFilter.TYPE, SiteAllowedFilter.from_params)
    registry.register(SloReservedFilter.TYPE, SloReservedFilter.from_params)
    registry.register(CapacityHeadroomScorer.TYPE, CapacityHeadroomScorer.from_params)
    registry.register(LeastRequestsScorer.TYPE, LeastRequestsScorer.from_params)
    registry.register(PrefixAffinityScorer.TYPE, PrefixAffinityScorer.from_params)
    registry.register(SiteLocalityScorer.TYPE, SiteLocalityScorer.from_params)
    registry.register(LatencySloScorer.TYPE, LatencySloScorer.from_params)
    registry.register(MaxScorePicker.TYPE, MaxScorePicker.from_params)
    registry.register(RoundRobinPicker.TYPE, RoundRobinPicker.from_params)
    registry.register(PowerOfTwoPicker.TYPE, PowerOfTwoPicker.from_params)
    registry.register(WeightedRandomPicker.TYPE, WeightedRandomPicker.from_params)
    return registry
