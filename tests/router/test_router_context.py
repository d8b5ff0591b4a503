"""The router reads only what routing needs from a request: model, a prompt-length estimate, the
output limit, streaming, a stable prefix hash, priority and the client's site."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from orchestrator.core.errors import OrchestratorError
from orchestrator.core.slo import SloTarget, SloTargets
from orchestrator.frontends.http.context import PREFIX_CHARS, request_context, responses_context
from orchestrator.routing.context import Priority, class_lanes

MODEL = "openai/gpt-oss-120b"
LONG = "You are a careful assistant for fleet operators. " * 8  # > 256 characters


def chat(**body: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **body}


def test_a_chat_gets_its_length_estimate_limit_and_stream_flag() -> None:
    ctx = request_context(chat(max_tokens=100, stream=True), {}, chat=True, default_model=None)

    assert ctx.model == MODEL
    assert ctx.prompt_tokens == 3 + 4 + 2  # reply + one message + ceil(5 bytes / 4)
    assert ctx.max_tokens == 100
    assert ctx.stream is True
    assert ctx.priority is Priority.INTERACTIVE
    assert ctx.prefix_hash is None  # too short to keep together


def test_max_completion_tokens_wins_over_max_tokens_for_chats() -> None:
    ctx = request_context(
        chat(max_tokens=100, max_completion_tokens=7), {}, chat=True, default_model=None
    )

    assert ctx.max_tokens == 7


def test_text_prompts_count_bytes_and_token_id_prompts_count_ids() -> None:
    text = request_context({"model": MODEL, "prompt": "é" * 10}, {}, chat=False, default_model=None)
    ids = request_context(
        {"model": MODEL, "prompt": list(range(100))}, {}, chat=False, default_model=None
    )
    batch = request_context(
        {"model": MODEL, "prompt": ["abcd", "abcdefgh"]}, {}, chat=False, default_model=None
    )

    assert text.prompt_tokens == 5  # 20 UTF-8 bytes
    assert ids.prompt_tokens == 100 and ids.prefix_hash is not None
    assert batch.prompt_tokens == 3


def test_requests_sharing_a_long_system_prompt_share_a_prefix_hash() -> None:
    def with_question(question: str) -> int | None:
        messages = [{"role": "system", "content": LONG}, {"role": "user", "content": question}]
        body = {"model": MODEL, "messages": messages}
        return request_context(body, {}, chat=True, default_model=None).prefix_hash

    other = [{"role": "system", "content": LONG.upper()}, {"role": "user", "content": "a"}]
    other_hash = request_context(
        {"model": MODEL, "messages": other}, {}, chat=True, default_model=None
    ).prefix_hash

    assert with_question("What is MI355X?") == with_question("And MI300X?") is not None
    assert other_hash != with_question("a")


def test_the_prefix_hash_is_stable_across_processes() -> None:
    """Not Python's per-process salted `hash()`: every worker and every router must agree."""
    prompt = "x" * PREFIX_CHARS
    here = request_context({"model": MODEL, "prompt": prompt}, {}, chat=False, default_model=None)
    code = (
        "from orchestrator.frontends.http.context import prefix_hash; "
        f"print(prefix_hash({prompt!r}))"
    )
    elsewhere = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        for seed in ("1", "2")
    }

    assert elsewhere == {str(here.prefix_hash)}
    longer = {"model": MODEL, "prompt": prompt + "tail"}
    assert request_context(longer, {}, chat=False, default_model=None).prefix_hash == int(
        elsewhere.pop()
    )


def test_priority_comes_from_the_header_or_the_body_and_site_from_the_header() -> None:
    from_header = request_context(
        chat(priority="interactive"),
        {"x-priority": "Batch", "x-client-site": " kr "},
        chat=True,
        default_model=None,
    )
    from_body = request_context(chat(priority="batch"), {}, chat=True, default_model=None)
    vllm_style = request_context(chat(priority=5), {}, chat=True, default_model=None)

    assert from_header.priority is Priority.BATCH and from_header.client_site == "kr"
    assert from_body.priority is Priority.BATCH and from_body.client_site is None
    assert vllm_style.priority is Priority.INTERACTIVE  # vLLM's integer priority is the engine's


def test_an_operator_class_is_selectable_and_admitted_in_the_lane_its_ttft_implies() -> None:
    targets = SloTargets(
        SloTarget(),
        {"interactive": SloTarget(1.0, 0.05), "premium": SloTarget(0.5, 0.03),
         "bulk": SloTarget(60.0, 0.3)},
    )  # fmt: skip
    lanes = class_lanes(targets)
    assert lanes == {
        "interactive": Priority.INTERACTIVE, "batch": Priority.BATCH,
        "premium": Priority.INTERACTIVE, "bulk": Priority.BATCH,
    }  # fmt: skip

    premium = request_context(
        chat(), {"x-priority": " Premium"}, chat=True, default_model=None, classes=lanes
    )
    bulk = responses_context(
        {"model": MODEL, "input": "x", "priority": "bulk"}, {}, default_model=None, classes=lanes
    )
    builtin = request_context(chat(priority="batch"), {}, chat=True, default_model=None)
    assert (premium.priority, premium.slo_class, premium.target_class) == (
        Priority.INTERACTIVE, "premium", "premium",
    )  # fmt: skip
    assert (bulk.priority, bulk.target_class) == (Priority.BATCH, "bulk")
    assert (builtin.slo_class, builtin.target_class) == (None, "batch")
    with pytest.raises(OrchestratorError) as unknown:
        request_context(chat(priority="gold"), {}, chat=True, default_model=None, classes=lanes)
    assert unknown.value.param == "priority"
    assert "`premium`" in unknown.value.message and "'gold'" in unknown.value.message


def test_a_missing_model_means_the_fleets_only_model_or_an_error() -> None:
    body = {"messages": [{"role": "user", "content": "x"}]}

    assert request_context(body, {}, chat=True, default_model=MODEL).model == MODEL
    with pytest.raises(OrchestratorError) as raised:
        request_context(body, {}, chat=True, default_model=None)
    assert raised.value.param == "model"


def test_non_positive_limits_are_left_to_the_replica_to_judge() -> None:
    ctx = request_context(chat(max_tokens=0), {}, chat=True, default_model=None)

    assert ctx.max_tokens is None
