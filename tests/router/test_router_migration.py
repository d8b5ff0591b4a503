"""Per-attempt timeouts and mid-stream migration against real simulated replicas (processes that
a test SIGSTOPs and SIGKILLs), read with the official `openai` client.

A replica that never sends a first byte costs a request one first-byte timeout, then it is
answered elsewhere. A stream whose replica stalls, dies or drains mid-way continues on another
replica (and again when that one dies too), and the client reads one well-formed stream: one id,
one role delta, one finish, one usage, and the very text and usage a replay of the same request
on a healthy replica gives. A Responses stream continues the same way (as a chat continuation the
router renders as Responses events): one response, its items under their ids, sequence numbers
without a gap, and the replay's items and usage; one whose input a chat cannot express ends with
the error event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import openai
import pytest
from replica_server import ReplicaThread
from router_harness import (
    MODEL,
    ReplicaEntry,
    RouterThread,
    SimProcess,
    running_router,
    sim_processes,
    wait_until,
)

from orchestrator.core.records import ReplicaState
from orchestrator.forwarding.breaker import BreakerSettings, BreakerState
from orchestrator.router_service import RouterSettings

TIME_SCALE = 10.0  # about 15 ms a token: a 160-token answer streams for about 2.5 s
OUTPUT_TOKENS = 160
FAULT_AFTER_CHUNKS = 30
SETTINGS = RouterSettings(
    first_byte_timeout_s=1.0,
    stall_timeout_s=0.5,
    request_deadline_s=30.0,
    breaker=BreakerSettings(open_s=0.5),  # a replica that was stopped is back soon after
)
QUESTION = [{"role": "user", "content": "Tell the fleet about its capacity."}]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@dataclass
class Fleet:
    sims: list[SimProcess]
    router: RouterThread
    ids: dict[str, SimProcess] = field(default_factory=dict)

    def serving(self) -> list[str]:
        """Replicas that hold a movable stream now (read across threads: a snapshot)."""
        return sorted(dict(self.router.service.dispatcher.streams))

    def signal(self, replica_id: str, signum: signal.Signals) -> None:
        os.killpg(self.ids[replica_id].process.pid, signum)

    def settle(self) -> None:
        """Wait until every live replica is routable again and no stream is left."""
        breakers = self.router.service.breakers

        def settled() -> bool:
            live = [i for i, sim in self.ids.items() if sim.process.poll() is None]
            closed = all(breakers.state(i) is not BreakerState.OPEN for i in live)
            return closed and not self.serving()

        assert wait_until(settled, 15.0), (
            {i: breakers.state(i) for i in self.ids},
            self.serving(),
        )

    def drain(self, replica_id: str, state: ReplicaState = ReplicaState.DRAINING) -> None:
        """Set `replica_id`'s state in the router's table, on the router's loop."""

        async def replace() -> None:
            holder = self.router.service.table
            table = holder.snapshot()
            replicas = tuple(
                dataclasses.replace(r, state=state) if r.replica_id == replica_id else r
                for r in table.replicas
            )
            holder.replace(dataclasses.replace(table, version=table.version + 1, replicas=replicas))

        asyncio.run_coroutine_threadsafe(replace(), self.router._loop).result(5)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with sim_processes(3, time_scale=TIME_SCALE) as sims:
        entries = [
            ReplicaEntry(f"sim-{n}", sim.url, time_scale=TIME_SCALE) for n, sim in enumerate(sims)
        ]
        with running_router(entries, settings=SETTINGS) as router:
            built = Fleet(sims, router)
            built.ids = {entry.replica_id: sim for entry, sim in zip(entries, sims, strict=True)}
            yield built


@pytest.fixture(scope="module")
def oracle() -> Iterator[openai.OpenAI]:
    """A healthy replica that answers at once: the replay every stream is compared with."""
    from orchestrator.core.records import Generation
    from orchestrator.sim.replica import ReplicaSettings

    replica = ReplicaThread(ReplicaSettings(Generation.MI355X, time_scale=0.0)).start()
    try:
        yield openai.OpenAI(base_url=f"{replica.url}/v1", api_key="unused", max_retries=0)
    finally:
        replica.stop()


@dataclass
class Read:
    """What a client read from one stream."""

    ids: set[str] = field(default_factory=set)
    roles: int = 0
    finishes: list[str] = field(default_factory=list)
    usages: list[dict[str, int]] = field(default_factory=list)
    text: str = ""
    chunks: int = 0
    gap_s: float = 0.0  # the longest wait between two chunks


def request(seed: int) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": QUESTION,
        "max_tokens": OUTPUT_TOKENS,
        "seed": seed,
        "stream_options": {"include_usage": True},
    }


async def read_stream(url: str, seed: int, started: asyncio.Event) -> Read:
    read = Read()
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    async with client:
        stream = await client.chat.completions.create(stream=True, **request(seed))  # type: ignore[call-overload]
        last = time.monotonic()
        async for chunk in stream:
            now = time.monotonic()
            read.gap_s, last = max(read.gap_s, now - last), now
            read.ids.add(chunk.id)
            read.chunks += 1
            if chunk.usage is not None:
                read.usages.append(chunk.usage.model_dump(include={"prompt_tokens",
                                   "completion_tokens", "total_tokens"}))  # fmt: skip
            for choice in chunk.choices:
                read.roles += choice.delta.role is not None
                read.text += choice.delta.content or ""
                if choice.finish_reason is not None:
                    read.finishes.append(choice.finish_reason)
            if read.chunks == FAULT_AFTER_CHUNKS:
                started.set()
    return read


def check_against_replay(read: Read, oracle: openai.OpenAI, seed: int) -> None:
    replay = oracle.chat.completions.create(**request(seed) | {"stream_options": None})  # type: ignore[call-overload]
    assert replay.usage is not None
    assert len(read.ids) == 1 and read.roles == 1
    assert read.finishes == [replay.choices[0].finish_reason]
    assert read.text == replay.choices[0].message.content
    assert read.usages == [replay.usage.model_dump(include={"prompt_tokens",
                           "completion_tokens", "total_tokens"})]  # fmt: skip


def moved_stream(fleet: Fleet, seed: int, fault: Callable[[str], None]) -> tuple[Read, str]:
    """One stream, `fault` applied to its replica after `FAULT_AFTER_CHUNKS` chunks."""

    async def scenario() -> tuple[Read, str]:
        started = asyncio.Event()
        reading = asyncio.create_task(read_stream(fleet.router.url, seed, started))
        await asyncio.wait_for(started.wait(), 10)
        (replica_id,) = fleet.serving()
        fault(replica_id)
        return await asyncio.wait_for(reading, 20), replica_id

    return asyncio.run(scenario())


def migrations(fleet: Fleet, reason: str) -> float:
    return fleet.router.metric(
        "orchestrator_router_migrations_total", reason=reason, outcome="continued"
    )


def test_a_replica_that_never_answers_costs_a_stream_one_first_byte_timeout(
    fleet: Fleet, oracle: openai.OpenAI
) -> None:
    silent = fleet.sims[0]
    os.killpg(silent.process.pid, signal.SIGSTOP)
    try:

        async def four_streams() -> list[tuple[Read, float]]:
            async def one(seed: int) -> tuple[Read, float]:
                began = time.monotonic()
                read = await read_stream(fleet.router.url, seed, asyncio.Event())
                return read, time.monotonic() - began

            return await asyncio.gather(*(one(seed) for seed in range(4)))

        timeouts_before = fleet.router.metric(
            "orchestrator_router_upstream_errors_total", kind="first_byte_timeout"
        )
        outcomes = asyncio.run(four_streams())
        timeouts = fleet.router.metric(
            "orchestrator_router_upstream_errors_total", kind="first_byte_timeout"
        )
    finally:
        os.killpg(silent.process.pid, signal.SIGCONT)
    fleet.settle()
    assert timeouts > timeouts_before  # some went to the silent replica first
    for seed, (read, took_s) in enumerate(outcomes):
        check_against_replay(read, oracle, seed)
        assert took_s < SETTINGS.first_byte_timeout_s + 10  # not the 30 s deadline


def kill_twice(fleet: Fleet, first: str) -> None:
    """SIGKILL `first`, then the replica the stream moved to, once it streamed from there."""
    fleet.signal(first, signal.SIGKILL)

    def then_the_next() -> None:
        assert wait_until(lambda: bool(fleet.serving()) and fleet.serving() != [first], 5.0)
        time.sleep(0.4)
        (second,) = fleet.serving()
        fleet.signal(second, signal.SIGKILL)

    threading.Thread(target=then_the_next, daemon=True).start()


@dataclass
class ReadEvents:
    """What a client read from one Responses stream, event by event."""

    types: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    response_ids: set[str] = field(default_factory=set)
    item_ids: dict[int, set[str]] = field(default_factory=dict)  # by output_index
    deltas: dict[int, str] = field(default_factory=dict)
    dones: dict[int, str] = field(default_factory=dict)
    final: openai.types.responses.Response | None = None
    error: str | None = None  # the code of an `error` event


def responses_request(seed: int) -> dict[str, object]:
    return {
        "model": MODEL,
        "input": QUESTION[0]["content"],
        "max_output_tokens": OUTPUT_TOKENS,
        "extra_body": {"seed": seed},
    }


async def read_events(
    url: str, body: dict[str, object], fault_after: int, started: asyncio.Event
) -> ReadEvents:
    read = ReadEvents()
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    async with client:
        stream = await client.responses.create(stream=True, **body)  # type: ignore[call-overload]
        async for event in stream:
            read.types.append(event.type)
            read.numbers.append(event.sequence_number)
            if hasattr(event, "response"):
                read.response_ids.add(event.response.id)
            index: int = getattr(event, "output_index", -1)
            if index >= 0:
                item_id = getattr(event, "item_id", None) or event.item.id
                read.item_ids.setdefault(index, set()).add(item_id)
            if event.type.endswith("_text.delta"):
                read.deltas[index] = read.deltas.get(index, "") + event.delta
            if event.type.endswith("_text.done"):
                read.dones[index] = event.text
            if event.type == "response.completed":
                read.final = event.response
            if event.type == "error":
                read.error = event.code
            if sum(t.endswith("_text.delta") for t in read.types) == fault_after:
                started.set()
    return read


@pytest.mark.parametrize(
    ("fault", "seed", "where"),
    [("drain", 343, "reasoning"), ("SIGSTOP", 382, "message")],  # replays of both items
)
def test_a_responses_stream_continues_elsewhere_as_one_response(
    fleet: Fleet, oracle: openai.OpenAI, fault: str, seed: int, where: str
) -> None:
    replay = oracle.responses.create(**responses_request(seed))  # type: ignore[call-overload]
    assert replay.usage is not None and [i.type for i in replay.output] == ["reasoning", "message"]
    reasoning = replay.usage.output_tokens_details.reasoning_tokens
    answer = replay.usage.output_tokens - reasoning
    fault_after = reasoning // 2 if where == "reasoning" else reasoning + answer // 2
    reason = {"SIGSTOP": "stall", "drain": "drain"}[fault]
    before = migrations(fleet, reason)
    read = faulted_events(fleet, responses_request(seed), fault_after, fault)
    assert migrations(fleet, reason) == before + 1
    assert read.numbers == list(range(len(read.numbers)))  # no gap, no repeat
    assert read.types.count("response.created") == 1 and read.types[-1] == "response.completed"
    assert read.types.count("response.completed") == 1
    assert len(read.response_ids) == 1 and all(len(ids) == 1 for ids in read.item_ids.values())
    final = read.final
    assert final is not None and final.status == replay.status
    texts = [item.content[0].text for item in replay.output]
    assert [item.content[0].text for item in final.output] == texts  # type: ignore[union-attr,index]
    assert [read.deltas[0], read.dones[0], read.deltas[1], read.dones[1]] == [
        texts[0], texts[0], texts[1], texts[1]
    ]  # fmt: skip
    assert [item.id for item in final.output] == [next(iter(read.item_ids[n])) for n in (0, 1)]
    assert final.usage is not None
    assert final.usage.model_dump(exclude_none=True) == replay.usage.model_dump(exclude_none=True)
    fleet.settle()


def faulted_events(
    fleet: Fleet, body: dict[str, object], fault_after: int, fault: str
) -> ReadEvents:
    """One Responses stream, its replica drained or stopped after `fault_after` deltas."""

    async def scenario() -> tuple[ReadEvents, str]:
        started = asyncio.Event()
        reading = asyncio.create_task(read_events(fleet.router.url, body, fault_after, started))
        await asyncio.wait_for(started.wait(), 10)
        (replica_id,) = fleet.serving()
        if fault == "drain":
            fleet.drain(replica_id)
        else:
            fleet.signal(replica_id, signal.SIGSTOP)
        return await asyncio.wait_for(reading, 20), replica_id

    read, faulted = asyncio.run(scenario())
    if fault == "SIGSTOP":
        fleet.signal(faulted, signal.SIGCONT)
    else:
        fleet.drain(faulted, ReplicaState.READY)
    return read


def test_a_responses_stream_whose_input_a_chat_cannot_express_ends_with_the_error_event(
    fleet: Fleet,
) -> None:
    called = [
        {"type": "function_call", "call_id": "call_1", "name": "capacity", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42 replicas"},
    ]
    body = responses_request(343)
    body["input"] = [{"role": "user", "content": QUESTION[0]["content"]}, *called]
    impossible = fleet.router.metric(
        "orchestrator_router_migrations_total", reason="drain", outcome="impossible"
    )
    read = faulted_events(fleet, body, 10, "drain")
    assert read.types[-1] == "error" and read.error == "unavailable"
    assert read.numbers == list(range(len(read.numbers)))  # numbered after what was sent
    assert "response.completed" not in read.types
    assert (
        fleet.router.metric(
            "orchestrator_router_migrations_total", reason="drain", outcome="impossible"
        )
        == impossible + 1
    )
    fleet.settle()


def test_a_responses_stream_with_tools_continues_into_the_call_it_would_have_made(
    fleet: Fleet, oracle: openai.OpenAI
) -> None:
    tool = {
        "type": "function",
        "name": "fleet_capacity",
        "parameters": {"type": "object", "properties": {"site": {"type": "string"}},
                       "required": ["site"]},
    }  # fmt: skip
    body = responses_request(343) | {"tools": [tool]}
    replay = oracle.responses.create(**body)  # type: ignore[call-overload]
    assert replay.usage is not None
    assert [i.type for i in replay.output] == ["reasoning", "function_call"]
    before = migrations(fleet, "drain")
    fault_after = replay.usage.output_tokens_details.reasoning_tokens // 2
    read = faulted_events(fleet, body, fault_after, "drain")
    assert migrations(fleet, "drain") == before + 1  # it moved in its reasoning
    assert read.numbers == list(range(len(read.numbers)))
    assert read.final is not None and read.final.usage is not None
    (reasoning, call), (replayed_reasoning, replayed_call) = read.final.output, replay.output
    assert reasoning.content == replayed_reasoning.content  # type: ignore[union-attr]
    assert (call.name, call.arguments, call.status) == (  # type: ignore[union-attr]
        replayed_call.name,  # type: ignore[union-attr]
        replayed_call.arguments,  # type: ignore[union-attr]
        "completed",
    )
    usage = read.final.usage.model_dump(exclude_none=True)
    assert usage == replay.usage.model_dump(exclude_none=True)
    fleet.settle()


@pytest.mark.parametrize("fault", ["drain", "SIGSTOP", "SIGKILL"])  # the kills last: they stay dead
def test_a_stream_continues_elsewhere_when_its_replica_stalls_drains_or_dies(
    fleet: Fleet, oracle: openai.OpenAI, fault: str
) -> None:
    reason = {"SIGSTOP": "stall", "drain": "drain", "SIGKILL": "disconnect"}[fault]
    before = migrations(fleet, reason)
    actions: dict[str, Callable[[str], None]] = {
        "SIGSTOP": lambda replica: fleet.signal(replica, signal.SIGSTOP),
        "drain": fleet.drain,
        "SIGKILL": lambda replica: kill_twice(fleet, replica),  # its continuation moves again
    }
    seed = 100 + len(fault)
    read, faulted = moved_stream(fleet, seed, actions[fault])
    if fault == "SIGSTOP":
        fleet.signal(faulted, signal.SIGCONT)
    if fault == "drain":
        fleet.drain(faulted, ReplicaState.READY)
    print(f"\n{fault}: {read.chunks} chunks, longest gap {read.gap_s:.2f} s")
    check_against_replay(read, oracle, seed)
    assert migrations(fleet, reason) == before + (2 if fault == "SIGKILL" else 1)
    if fault == "SIGSTOP":  # detected by the stall bound, not the deadline
        assert read.gap_s < SETTINGS.stall_timeout_s + 2.0
    if fault != "SIGKILL":
        fleet.settle()


def test_a_stream_with_no_replica_left_to_move_to_ends_with_the_error_event_and_frees_its_slot(
    fleet: Fleet,
) -> None:
    """Every replica drains at once: the move finds no candidate; the client still gets the
    terminal error event (not a cut body) and the stream's admission slot comes back."""
    admission = fleet.router.service.admission
    before = fleet.router.metric(
        "orchestrator_router_migrations_total", reason="drain", outcome="failed"
    )

    def drain_all(_replica: str) -> None:
        for replica_id in fleet.ids:
            fleet.drain(replica_id)

    try:
        with pytest.raises(openai.APIError) as raised:
            moved_stream(fleet, 7, drain_all)
        assert not isinstance(raised.value, openai.APIConnectionError), raised.value
    finally:
        for replica_id in fleet.ids:
            if fleet.ids[replica_id].process.poll() is None:
                fleet.drain(replica_id, ReplicaState.READY)
    assert wait_until(lambda: admission.active() == 0 and not fleet.serving(), 5.0)
    failed = fleet.router.metric(
        "orchestrator_router_migrations_total", reason="drain", outcome="failed"
    )
    assert failed == before + 1
