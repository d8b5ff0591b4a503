"""The real SGLang router (from PyPI) accepts simulated replicas as workers and spreads OpenAI
traffic over them: the replicas look like SGLang/vLLM servers from outside."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from replica_metrics import value
from replica_server import ReplicaThread, replica

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings

pytestmark = pytest.mark.slow

READY_WITHIN_S = 60.0
STOPPED_WITHIN_S = 15.0


@dataclass(frozen=True)
class RoutedFleet:
    router_url: str
    replicas: tuple[ReplicaThread, ...]
    model: str


def write_local_tokenizer(folder: Path) -> Path:
    """A tiny word-level tokenizer in Hugging Face's format.

    The router loads the tokenizer of the model its workers serve; with a model name that is a
    hub id it would try to download one. Serving the model under this local path keeps every
    byte on this machine.
    """
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary = {"[UNK]": 0} | {word: i + 1 for i, word in enumerate(["route", "me", "spread"])}
    unknown = {"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False}
    unknown |= {"rstrip": False, "normalized": False, "special": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [unknown],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocabulary, "unk_token": "[UNK]"},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def readiness(url: str) -> dict | None:
    """The router's `/readiness` body, or None while it does not answer 200."""
    try:
        with urllib.request.urlopen(f"{url}/readiness", timeout=2) as response:
            return json.loads(response.read()) if response.status == 200 else None
    except (OSError, ValueError):
        return None


def wait_ready(url: str, workers: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + READY_WITHIN_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"router exited early:\n{log.read_text()[-4000:]}"
        state = readiness(url)
        if state and state.get("healthy_workers") == workers:
            return
        time.sleep(0.1)
    pytest.fail(f"router not ready in {READY_WITHIN_S:.0f}s:\n{log.read_text()[-4000:]}")


def port_is_closed(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoutedFleet]:
    """Two MI355X replicas behind a round-robin SGLang router, stopped and checked gone after."""
    workdir = tmp_path_factory.mktemp("sglang-router")
    log = workdir / "router.log"
    model = str(write_local_tokenizer(workdir / "gpt-oss-120b"))
    with ExitStack() as stack:
        replicas = tuple(
            stack.enter_context(
                replica(
                    ReplicaSettings(Generation.MI355X, model_name=model, time_scale=0.0, seed=seed)
                )
            )
            for seed in (1, 2)
        )
        port = free_port()
        command = [
            sys.executable, "-m", "sglang_router.launch_router",
            "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *(r.url for r in replicas),
            "--policy", "round_robin",
            "--log-level", "warn",
            "--prometheus-port", str(free_port()),  # its default, 29000, may be taken
        ]  # fmt: skip
        with log.open("wb") as sink:
            router = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, len(replicas), router, log)
            yield RoutedFleet(url, replicas, model)
        finally:
            router.terminate()
            try:
                router.wait(timeout=STOPPED_WITHIN_S)
            except subprocess.TimeoutExpired:
                router.kill()
                router.wait(timeout=STOPPED_WITHIN_S)
        assert router.returncode is not None
        assert port_is_closed(port)


def served(fleet: RoutedFleet) -> list[float]:
    return [value(r.url, "vllm:request_success_total") for r in fleet.replicas]


def test_completions_through_the_router_are_answered_by_the_replicas(fleet: RoutedFleet) -> None:
    client = openai.OpenAI(base_url=f"{fleet.router_url}/v1", api_key="unused", max_retries=0)

    reply = client.completions.create(
        model=fleet.model, prompt="Route me", max_tokens=12, extra_body={"ignore_eos": True}
    )

    assert reply.object == "text_completion"
    assert reply.usage.completion_tokens == 12
    assert len(reply.choices[0].text.split()) == 12
    assert reply.choices[0].finish_reason == "length"


def test_a_streamed_chat_through_the_router_arrives_whole(fleet: RoutedFleet) -> None:
    client = openai.OpenAI(base_url=f"{fleet.router_url}/v1", api_key="unused", max_retries=0)

    chunks = list(
        client.chat.completions.create(
            model=fleet.model,
            messages=[{"role": "user", "content": "Route me"}],
            max_tokens=20,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 2
    assert len(content.split()) == 20
    assert chunks[-1].usage.completion_tokens == 20


def test_round_robin_spreads_requests_evenly_over_both_replicas(fleet: RoutedFleet) -> None:
    client = openai.OpenAI(base_url=f"{fleet.router_url}/v1", api_key="unused", max_retries=0)
    before = served(fleet)

    for call in range(8):
        if call % 2:
            client.completions.create(model=fleet.model, prompt="spread", max_tokens=4)
        else:
            stream = client.chat.completions.create(
                model=fleet.model,
                messages=[{"role": "user", "content": "spread"}],
                max_tokens=4,
                stream=True,
            )
            assert [c for c in stream if c.choices]

    gained = [after - start for after, start in zip(served(fleet), before, strict=True)]
    assert gained == [4, 4]


def test_a_responses_request_through_the_router_is_answered_whole_and_streamed(
    fleet: RoutedFleet,
) -> None:
    client = openai.OpenAI(base_url=f"{fleet.router_url}/v1", api_key="unused", max_retries=0)

    whole = client.responses.create(
        model=fleet.model, input="Route me", max_output_tokens=4000, extra_body={"seed": 1}
    )
    events = list(
        client.responses.create(
            model=fleet.model, input="Route me", stream=True, store=False, extra_body={"seed": 2}
        )
    )

    assert whole.object == "response" and whole.output_text
    assert whole.usage is not None and whole.usage.output_tokens <= 4000
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text  # type: ignore[union-attr]
