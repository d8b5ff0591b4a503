"""What `orchestrator status` makes of a `GetStatusResponse`: rows a person can read at a glance."""

from __future__ import annotations

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator.controlplane.admin_client import format_status, status_from_pb

MISSING = "metrics page lacks vllm:num_requests_waiting: load unknown"
UNPLACEABLE = "1 replica of pool 'us-mi355x' fit on no node: no live node is in site 'us'"


def response() -> pb.GetStatusResponse:
    def replica(id_: str, pool: str, site: str, generation: str, capacity: float) -> pb.Replica:
        return pb.Replica(
            id=id_, url="http://127.0.0.1:1", model="m", pool=pool, site=site,
            generation=generation, engine="sim", capacity_prior_tokens_per_s=capacity,
            state=pb.REPLICA_STATE_READY, node_health=pb.NODE_HEALTH_HEALTHY,
        )  # fmt: skip

    return pb.GetStatusResponse(
        version=7,
        pools=[
            pb.PoolStatus(
                name="kr-mi300x", site="kr", generation="MI300X", engine="sim", replicas=2
            ),
            pb.PoolStatus(
                name="us-mi355x",
                site="us",
                generation="MI355X",
                engine="sim",
                replicas=1,
                unplaceable=UNPLACEABLE,
            ),
            pb.PoolStatus(name="eu-ext", site="eu", generation="MI300X", engine="external"),
        ],
        replicas=[
            pb.ReplicaStatus(
                id="kr-a",
                pool="kr-mi300x",
                observed_state="ready",
                running=3,
                kv_cache_usage=0.25,
                replica=replica("kr-a", "kr-mi300x", "kr", "MI300X", 336.0),
                load=pb.ReplicaLoad(
                    replica_id="kr-a",
                    known=True,
                    running=3,
                    kv_cache_usage=0.25,
                    age_s=0.4,
                    capacity_tokens_per_s=301.0,
                ),
            ),
            pb.ReplicaStatus(id="kr-b", pool="kr-mi300x", observed_state="gone"),
            pb.ReplicaStatus(
                id="us-a",
                pool="us-mi355x",
                observed_state="ready",
                replica=replica("us-a", "us-mi355x", "us", "MI355X", 1597.0),
                load=pb.ReplicaLoad(
                    replica_id="us-a",
                    known=False,
                    adapter_errors_total=4,
                    adapter_error=MISSING,
                    capacity_tokens_per_s=1597.0,
                ),
            ),
            pb.ReplicaStatus(
                id="us-b",
                pool="us-mi355x",
                observed_state="ready",
                running=9,
                replica=replica("us-b", "us-mi355x", "us", "MI355X", 1597.0),
                load=pb.ReplicaLoad(replica_id="us-b", known=True, running=9, age_s=7.5),
            ),
        ],
    )


def test_a_gone_replica_keeps_its_pools_site_and_generation_and_counts_as_not_ready() -> None:
    status = status_from_pb(response())
    gone = next(r for r in status.replicas if r.id == "kr-b")
    assert (gone.site, gone.generation, gone.state) == ("kr", "MI300X", "gone")
    ready = {p.name: (p.ready, p.desired) for p in status.pools}
    assert ready == {"kr-mi300x": (1, 2), "us-mi355x": (2, 1), "eu-ext": (0, None)}


def test_the_table_lists_every_site_pool_and_replica_with_capacity_and_load() -> None:
    text = format_status(status_from_pb(response()))
    assert "sites: eu, kr, us" in text
    kr_a = next(line for line in text.splitlines() if line.startswith("kr-a "))
    assert kr_a.split() == [
        "kr-a", "kr-mi300x", "kr", "MI300X", "ready", "301", "3", "0", "25%", "fresh", "0.4s",
        "healthy", "0.0s", "ago",
    ]  # fmt: skip
    eu = next(line for line in text.splitlines() if line.startswith("eu-ext"))
    assert eu.split()[-2:] == ["-", "0"]


def test_a_pool_that_cannot_be_placed_says_why_under_the_pools_and_in_json() -> None:
    status = status_from_pb(response())
    text = format_status(status)
    assert f"us-mi355x is below size: {UNPLACEABLE}" in text.splitlines()
    assert "kr-mi300x is below size" not in text
    pools = {p["name"]: p for p in status.to_json()["pools"]}
    assert pools["us-mi355x"]["unplaceable"] == UNPLACEABLE
    assert pools["kr-mi300x"]["unplaceable"] == ""


def test_a_stale_or_unreadable_load_is_shown_so_and_never_as_idle_figures() -> None:
    status = status_from_pb(response())
    text = format_status(status)
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("us-")}
    assert lines["us-a"][6:10] == ["-", "-", "-", "unknown"]
    assert lines["us-b"][6:11] == ["9", "0", "0%", "stale", "7.5s"]
    assert f"us-a: load unknown after 4 unreadable pages: {MISSING}" in text.splitlines()
    row = next(r for r in status.to_json()["replicas"] if r["id"] == "us-a")
    assert (row["load"], row["adapter_errors"]) == ("unknown", 4)
