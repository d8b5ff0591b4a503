"""Per-replica circuit breakers: stop sending requests to a replica that keeps failing.

    closed --(failure_threshold consecutive failures)--> open
    open --(open_s passed and a health check succeeds)--> half-open
    half-open --(the one probe request succeeds)--> closed
    half-open --(the probe or a health check fails)--> open

Failures are connect errors, 5xx answers, streams cut mid-way and failed health checks; a 4xx
(the client's fault), a deadline or a client going away are not. A health success alone never
closes a circuit (a replica can answer `/health` and still fail requests), it only lets one probe
request through, and a replica that stays dead gets no requests at all once its circuit is open.
`ReplicaStats.circuit_open` mirrors "routing should skip this replica": true while open and while
the half-open probe is out, so the routing filters keep other requests away.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.config.breaker import BreakerSpec
from orchestrator.core.clock import Clock, MonotonicClock
from orchestrator.routing.fleet_state import FleetState

BreakerSettings = BreakerSpec  # declared once, as the `router.breaker` section


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class _Circuit:
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at_s: float = 0.0
    probing: bool = False


class CircuitBreakers:
    """One circuit per replica id, created closed on first use."""

    def __init__(
        self,
        fleet: FleetState,
        settings: BreakerSettings | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._fleet = fleet
        self.settings = settings or BreakerSettings()
        self._clock = clock or MonotonicClock()
        self._circuits: dict[str, _Circuit] = {}

    def state(self, replica_id: str) -> BreakerState:
        circuit = self._circuits.get(replica_id)
        return BreakerState.CLOSED if circuit is None else circuit.state

    def allow(self, replica_id: str) -> bool:
        """Whether a request may go to the replica now; in half-open, true for one probe only.

        Every allowed request must end in `succeeded`, `failed` or `released`.
        """
        circuit = self._circuits.get(replica_id)
        if circuit is None or circuit.state is BreakerState.CLOSED:
            return True
        if circuit.state is BreakerState.HALF_OPEN and not circuit.probing:
            circuit.probing = True
            self._mirror(replica_id, circuit)
            return True
        return False

    def succeeded(self, replica_id: str) -> None:
        """The replica answered a request (2xx or 4xx): close the circuit."""
        circuit = self._circuits.get(replica_id)
        if circuit is None or (circuit.state is BreakerState.CLOSED and circuit.failures == 0):
            return
        circuit.state, circuit.failures, circuit.probing = BreakerState.CLOSED, 0, False
        self._mirror(replica_id, circuit)

    def failed(self, replica_id: str) -> None:
        """A request or health check failed because of the replica."""
        circuit = self._circuit(replica_id)
        circuit.failures += 1
        if circuit.state is BreakerState.HALF_OPEN or (
            circuit.state is BreakerState.CLOSED
            and circuit.failures >= self.settings.failure_threshold
        ):
            circuit.state, circuit.opened_at_s = BreakerState.OPEN, self._clock.now()
            circuit.probing = False
            self._mirror(replica_id, circuit)

    def released(self, replica_id: str) -> None:
        """An allowed request ended without a verdict (client left, deadline): free the probe."""
        circuit = self._circuits.get(replica_id)
        if circuit is not None and circuit.probing:
            circuit.probing = False
            self._mirror(replica_id, circuit)

    def health_checked(self, replica_id: str, healthy: bool) -> None:
        """Fold in one health check: a failure counts as a failure, a success may half-open."""
        if not healthy:
            self.failed(replica_id)
            return
        circuit = self._circuits.get(replica_id)
        if (
            circuit is not None
            and circuit.state is BreakerState.OPEN
            and self._clock.now() - circuit.opened_at_s >= self.settings.open_s
        ):
            circuit.state, circuit.probing = BreakerState.HALF_OPEN, False
            self._mirror(replica_id, circuit)

    def forget(self, replica_id: str) -> None:
        self._circuits.pop(replica_id, None)

    def forget_except(self, live_ids: Set[str]) -> None:
        """Drop the circuits of replicas not in `live_ids` (the table's)."""
        for replica_id in [r for r in self._circuits if r not in live_ids]:
            del self._circuits[replica_id]

    def _circuit(self, replica_id: str) -> _Circuit:
        circuit = self._circuits.get(replica_id)
        if circuit is None:
            circuit = self._circuits[replica_id] = _Circuit()
        return circuit

    def _mirror(self, replica_id: str, circuit: _Circuit) -> None:
        self._fleet.circuit_changed(
            replica_id, circuit.state is BreakerState.OPEN or circuit.probing
        )
