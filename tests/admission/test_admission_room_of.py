"""The router's room for admission, read off its live fleet: the per-replica room that decides
whether a request fits is stretched by the capacity factor as the fleet-wide limit is."""

from __future__ import annotations

import dataclasses
import math

from orchestrator.admission.settings import AdmissionSettings
from orchestrator.config.slo import SloSpec, TargetSpec
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, ReplicaLoad, ReplicaState, Site
from orchestrator.core.slo import BATCH, INTERACTIVE, SloTargets
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.table.snapshot import RoutingTable
from orchestrator.table.source import TableHolder

MODEL = "m"


def _service(
    capacity_factor: float, slo: SloTargets | None = None, prior: float = 500.0
) -> tuple[RouterService, Replica]:
    replica = Replica(
        replica_id="r", url="http://127.0.0.1:9", model=MODEL, pool="kr-mi355x", site="kr",
        generation=Generation.MI355X, engine=EngineKind.SIM, capacity_prior_tokens_per_s=prior,
        state=ReplicaState.READY,
    )  # fmt: skip
    table = RoutingTable(version=1, replicas=(replica,), sites={"kr": Site("kr", {})})
    settings = RouterSettings(
        admission=AdmissionSettings(capacity_factor=capacity_factor), slo=slo or SloTargets()
    )
    service = RouterService(
        TableHolder(table), profile_named("capacity"), settings=settings, scrape_replicas=False
    )
    return service, replica


def test_the_capacity_factor_stretches_each_replicas_free_room_too() -> None:
    plain, replica = _service(1.0)
    room = plain.room_of(MODEL, INTERACTIVE)
    assert room is not None and math.isfinite(room.free)
    sequences = room.capacity  # one replica, nothing running: its whole room is free
    assert room.free == math.floor(sequences)
    for _ in range(math.floor(sequences)):  # full at the factor 1: no request fits
        plain.fleet.started(replica, plain.slo.target(MODEL, INTERACTIVE).tpot_s)
    full = plain.room_of(MODEL, INTERACTIVE)
    assert full is not None and full.free == 0
    doubled, replica = _service(2.0)
    for _ in range(math.floor(sequences)):  # the same load leaves room at twice the capacity
        doubled.fleet.started(replica, doubled.slo.target(MODEL, INTERACTIVE).tpot_s)
    stretched = doubled.room_of(MODEL, INTERACTIVE)
    assert stretched is not None
    assert stretched.free == math.floor(2 * sequences) - math.floor(sequences)


def test_a_looser_class_counts_only_what_the_tight_class_leaves_on_a_reserved_replica() -> None:
    """One replica runs both classes, so it is reserved for interactive's tight target: batch's
    room there is its tight batch less what runs and less interactive's claim not in flight
    (the requests waiting in admission count in it); interactive's is the whole tight batch."""
    slo = SloSpec(tpotS=0.014, classes={BATCH: TargetSpec(tpotS=0.03)}).targets()
    service, replica = _service(1.0, slo, prior=50_000.0)
    tight = service.slo.target(MODEL, INTERACTIVE).tpot_s
    loose = service.slo.target(MODEL, BATCH).tpot_s
    assert loose > tight
    for _ in range(5):
        service.fleet.started(replica, tight)
    service.fleet.started(replica, loose)
    stats = service.fleet.stats(replica.replica_id)
    assert stats is not None and stats.reserved_tpot_s == tight
    interactive = service.room_of(MODEL, INTERACTIVE)
    assert interactive is not None
    service._waiting_moved(MODEL, INTERACTIVE, 10)  # as admission reports them
    batch = service.room_of(MODEL, BATCH)
    sequences = stats.concurrency_capacity(tight)
    assert sequences > 100 and interactive.free == math.floor(sequences - 6)
    unclaimed = stats.tight_claim - 5
    assert unclaimed >= 11  # 15 in demand, 5 of them running here
    assert batch is not None and batch.free == math.floor(sequences - 6 - unclaimed)
    service._waiting_moved(MODEL, INTERACTIVE, -10)
    assert stats.tight_claim < 15
    # its engine queues behind the batch request: no room there for interactive until through
    service.fleet.reported(replica.replica_id, ReplicaLoad(6, 10, 0.5), now_s=0.0)
    queued = service.room_of(MODEL, INTERACTIVE)
    assert queued is not None and queued.free == 0


def test_the_room_follows_the_table_a_draining_or_new_replica_leaves_or_joins_it_at_once() -> None:
    service, replica = _service(1.0)
    one = service.room_of(MODEL, INTERACTIVE)
    assert one is not None
    second = dataclasses.replace(replica, replica_id="r2", url="http://127.0.0.1:10")
    service.table.replace(RoutingTable(2, (replica, second), {"kr": Site("kr", {})}))
    two = service.room_of(MODEL, INTERACTIVE)
    assert two is not None and two.capacity == 2 * one.capacity
    draining = dataclasses.replace(second, state=ReplicaState.DRAINING)
    service.table.replace(RoutingTable(3, (replica, draining), {"kr": Site("kr", {})}))
    back = service.room_of(MODEL, INTERACTIVE)
    assert back is not None and back.capacity == one.capacity
    service.fleet.circuit_changed("r", True)
    assert service.room_of(MODEL, INTERACTIVE) is None  # its one ready replica's circuit is open
