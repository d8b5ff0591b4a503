"""`orchestrator up` as a user runs it: one process that brings the whole stack up and down.

One stack (the built-in pools, on free ports, Ray's files in a directory of the test's own) serves
the tests of this module in order; the last one stops it with SIGTERM and checks the process table.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from listening_sockets import is_loopback, listening_addresses

from orchestrator.config import default_config_text
from orchestrator.fleet.figures import load_figures
from orchestrator.fleet.workload import WorkloadSampler

pytestmark = pytest.mark.slow
ORCHESTRATOR = [sys.executable, "-m", "orchestrator"]
READY_WITHIN_S = 90.0
REQUEST = {
    "model": "openai/gpt-oss-120b",
    "messages": [{"role": "user", "content": "Hello!"}],
    "max_tokens": 8,
}


@dataclass
class Stack:
    process: subprocess.Popen[str]
    started: float
    http: str
    control_plane: str
    ray_dir: Path
    banner: list[str] = field(default_factory=list)
    seen_pids: dict[int, str] = field(default_factory=dict)

    def remember_processes(self) -> None:
        """Note every process `up` has started so far (its descendants, by parent pid)."""
        for pid in descendants(self.process.pid):
            self.seen_pids.setdefault(pid, cmdline(pid))


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def write_config(directory: Path) -> Path:
    """The built-in config (same pools) on free ports."""
    config = yaml.safe_load(default_config_text())
    http, grpc, control, metrics = free_ports(4)
    config["router"].update(httpPort=http, grpcPort=grpc, metricsPort=metrics)
    config["controlPlane"]["grpcPort"] = control
    config["exporters"]["port"] = 0  # free ports, whatever the node count
    path = directory / "orchestrator.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def processes_mentioning(text: str) -> list[str]:
    return [
        line
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and alive(int(entry.name))
        and text in (line := cmdline(int(entry.name)))
    ]  # fmt: skip


def orchestrator(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCHESTRATOR, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def chat(stack: Stack) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{stack.http}/v1/chat/completions",
        data=json.dumps(REQUEST).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body: dict[str, Any] = json.loads(response.read())
    return body


def status(stack: Stack) -> dict[str, Any]:
    result = orchestrator("status", "--json", "--control-plane", stack.control_plane)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def eventually_status(stack: Stack, check: Any, timeout_s: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        current = status(stack)
        if check(current):
            return current
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}: {current}"
        time.sleep(0.5)


def ready_in(current: dict[str, Any], pool: str) -> int:
    return next(p["ready"] for p in current["pools"] if p["name"] == pool)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    directory = Path(tempfile.mkdtemp(prefix="up-", dir="/tmp"))  # short: Ray's socket paths
    config = yaml.safe_load(write_config(directory).read_text())
    ray_dir = directory / "ray"
    process = subprocess.Popen(
        [*ORCHESTRATOR, "up", "--config", str(directory / "orchestrator.yaml")],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        env={**os.environ, "RAY_TMPDIR": str(ray_dir)},
        start_new_session=True,
    )
    running = Stack(
        process=process,
        started=time.monotonic(),
        http=f"http://127.0.0.1:{config['router']['httpPort']}",
        control_plane=f"127.0.0.1:{config['controlPlane']['grpcPort']}",
        ray_dir=ray_dir,
    )
    try:
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for pid in running.seen_pids:
            if alive(pid) and cmdline(pid) == running.seen_pids[pid]:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)


def test_a_chat_completion_through_the_router_succeeds_within_90_s_of_start(stack: Stack) -> None:
    stdout = stack.process.stdout
    assert stdout is not None
    threading.Thread(target=lambda: stack.banner.extend(stdout), daemon=True).start()
    deadline = stack.started + READY_WITHIN_S
    while not any("orchestrator is up" in line for line in stack.banner):
        assert stack.process.poll() is None, f"up exited with {stack.process.returncode}"
        assert time.monotonic() < deadline, "no ready banner within 90 s"
        time.sleep(0.2)
    answer = chat(stack)
    elapsed_s = time.monotonic() - stack.started
    print(f"first chat completion {elapsed_s:.1f} s after start")
    assert answer["choices"][0]["message"]["content"]
    assert elapsed_s < READY_WITHIN_S
    banner = "".join(stack.banner)
    assert f"{stack.http}/v1" in banner and "curl" in banner and "us-mi355x" in banner
    stack.remember_processes()


def test_every_process_up_started_listens_on_loopback_only(stack: Stack) -> None:
    stack.remember_processes()
    processes = {stack.process.pid: cmdline(stack.process.pid), **stack.seen_pids}
    listening = {pid: addresses for pid in processes if (addresses := listening_addresses(pid))}
    kinds = " ".join(processes[pid] for pid in listening)
    # The Ray processes, the replicas' actors and the router all hold listening sockets.
    assert "gcs_server" in kinds and "raylet" in kinds and "router" in kinds, kinds
    assert len(listening) >= 8, listening
    exposed = [
        f"{processes[pid][:90]}: {host}:{port}"
        for pid, addresses in listening.items()
        for host, port in addresses
        if not is_loopback(host)
    ]
    assert not exposed, "listening beyond loopback:\n" + "\n".join(exposed)


def test_status_lists_2_sites_2_generations_and_4_ready_replicas_mi355x_over_3x_mi300x(
    stack: Stack,
) -> None:
    current = status(stack)
    replicas = current["replicas"]
    assert current["sites"] == ["kr", "us"]
    assert {r["generation"] for r in replicas} == {"MI300X", "MI355X"}
    assert [r["state"] for r in replicas] == ["ready"] * 4
    capacity = {r["generation"]: r["capacity_tokens_per_s"] for r in replicas}
    assert capacity["MI355X"] > 3 * capacity["MI300X"] > 0
    table = orchestrator("status", "--control-plane", stack.control_plane)
    assert table.returncode == 0 and "CAPACITY" in table.stdout and "kr-mi300x" in table.stdout


def test_unknown_pools_are_named_and_exit_2(stack: Stack) -> None:
    for args in (["scale", "nope", "3"], ["drain", "nope"]):
        result = orchestrator(*args, "--control-plane", stack.control_plane)
        assert result.returncode == 2
        assert "'nope'" in result.stderr and "kr-mi300x" in result.stderr


def short_seed(most_tokens: int = 30) -> int:
    """A seed whose drawn output length is short, so a replica ten times slower than hardware
    still answers in seconds (the simulated engine draws lengths as `WorkloadSampler` does)."""
    sampler = WorkloadSampler(load_figures().workload)
    return next(s for s in range(10_000) if sampler.output_length(random.Random(s)) <= most_tokens)


def test_a_responses_tool_round_trip_with_the_openai_client_stays_on_one_replica(
    stack: Stack,
) -> None:
    client = openai.OpenAI(base_url=f"{stack.http}/v1", api_key="unused", max_retries=0)
    tool = {"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"site": {"type": "string"}},
                           "required": ["site"]}}  # fmt: skip
    seed = {"seed": short_seed()}

    first = client.responses.with_raw_response.create(
        model=REQUEST["model"], input="Weather in Seoul?", tools=[tool], extra_body=seed
    )
    call = next(item for item in first.parse().output if item.type == "function_call")
    assert "site" in json.loads(call.arguments)
    events = list(
        client.responses.create(
            model=REQUEST["model"],
            previous_response_id=first.parse().id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
            tools=[tool],
            stream=True,
            extra_body=seed,
        )
    )
    final = events[-1].response  # type: ignore[union-attr]
    assert events[-1].type == "response.completed" and final.output_text
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens > 0
    again = client.responses.with_raw_response.retrieve(final.id)
    holder = first.headers["x-orchestrator-replica"]
    assert again.headers["x-orchestrator-replica"] == holder
    assert again.parse().output_text == final.output_text


def test_requests_keep_succeeding_while_a_pool_scales_to_3_and_back_and_another_drains(
    stack: Stack,
) -> None:
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def load() -> None:
        nonlocal answered
        while not stop.is_set():
            try:
                chat(stack)
                answered += 1
            except (urllib.error.URLError, OSError) as error:
                failures.append(repr(error))

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        scale = orchestrator("scale", "kr-mi300x", "3", "--control-plane", stack.control_plane)
        assert scale.returncode == 0, scale.stderr
        eventually_status(stack, lambda s: ready_in(s, "kr-mi300x") == 3, 30, "3 ready in kr")
        stack.remember_processes()
        scale = orchestrator("scale", "kr-mi300x", "2", "--control-plane", stack.control_plane)
        assert scale.returncode == 0, scale.stderr
        eventually_status(stack, lambda s: ready_in(s, "kr-mi300x") == 2, 30, "back to 2 in kr")
        drain = orchestrator("drain", "us-mi355x", "--control-plane", stack.control_plane)
        assert drain.returncode == 0, drain.stderr
        eventually_status(stack, lambda s: ready_in(s, "us-mi355x") == 0, 30, "us drained")
        time.sleep(2)
    finally:
        stop.set()
        loader.join(60)
    assert not failures, failures[:3]
    assert answered > 10


def test_sigterm_stops_up_and_every_process_it_started(stack: Stack) -> None:
    stack.remember_processes()
    (session,) = [line.split()[-1] for line in stack.banner if "Ray session" in line]
    assert session.startswith(str(stack.ray_dir))
    kinds = " ".join(stack.seen_pids.values())
    assert "raylet" in kinds and "gcs_server" in kinds and "router" in kinds

    stack.process.send_signal(signal.SIGTERM)
    assert stack.process.wait(60) == 0
    deadline = time.monotonic() + 15
    while left := [
        f"{pid} {line}"
        for pid, line in stack.seen_pids.items()
        if alive(pid) and cmdline(pid) == line
    ] + [p for p in processes_mentioning(session)]:
        assert time.monotonic() < deadline, f"left running after up stopped: {left}"
        time.sleep(0.2)
