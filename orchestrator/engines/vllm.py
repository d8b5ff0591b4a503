"""vLLM on ROCm, serving GPT-OSS-120B as vLLM's gpt-oss recipe for AMD GPUs says.

The recipe (vLLM's "GPT-OSS" recipe, AMD section, validated on vLLM 0.17; see
https://docs.vllm.ai/projects/recipes/en/latest/OpenAI/GPT-OSS.html) selects AITER's unified
attention with `--attention-backend ROCM_AITER_UNIFIED_ATTN` and `VLLM_ROCM_USE_AITER=1`, runs at
`--gpu-memory-utilization 0.95 --block-size 64`, and serves AMD's MXFP4-weight, FP8-activation
checkpoint on MI355X. Engines older than 0.17 get the 2025 ROCm recipe instead, which chose the
kernel by environment (`VLLM_USE_AITER_UNIFIED_ATTENTION=1`, `VLLM_ROCM_USE_AITER_MHA=0`). Every
version gets the tool-call flags that the Responses API and chat `tools` need.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Final

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines.base import (
    LaunchCommand,
    LaunchSpec,
    MetricNames,
    Series,
    version_from_json,
    version_tuple,
)
from orchestrator.engines.metrics import parse_replica_load

METRIC_NAMES: Final = MetricNames(
    running=(Series("vllm:num_requests_running"),),
    waiting=(Series("vllm:num_requests_waiting"),),
    # Despite the name, a ratio in [0, 1] ("1 means 100 percent usage").
    kv_cache_usage=Series("vllm:kv_cache_usage_perc"),
    # vLLM counts tokens as each engine step produces them, so the rate is live.
    generation_tokens=(Series("vllm:generation_tokens_total"),),
    prompt_tokens=(Series("vllm:prompt_tokens_total"),),
)

GPT_OSS_120B: Final = "openai/gpt-oss-120b"
# The checkpoint each generation serves for GPT-OSS-120B, when it is not the published one; the
# replica still answers to the published name (`--served-model-name`), which routing uses.
CHECKPOINTS: Final = MappingProxyType({Generation.MI355X: "amd/gpt-oss-120b-w-mxfp4-a-fp8"})
COMMON_ARGS: Final = (
    "--kv-cache-dtype", "fp8",
    "--max-model-len", "131072",
    # gpt-oss's harmony tool calls, parsed into `tool_calls` and Responses `function_call` items.
    "--tool-call-parser", "openai",
    "--enable-auto-tool-choice",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Recipe:
    """The launch settings of one range of engine versions."""

    since: tuple[int, ...]
    args: tuple[str, ...]
    env: MappingProxyType[str, str]


RECIPES: Final = (  # newest first
    Recipe(
        since=(0, 17),
        args=(
            "--attention-backend",
            "ROCM_AITER_UNIFIED_ATTN",
            "--gpu-memory-utilization",
            "0.95",
            "--block-size",
            "64",
        ),
        # AITER (AMD's kernel library) for MoE, GEMM, norms and the attention backend above.
        env=MappingProxyType({"VLLM_ROCM_USE_AITER": "1"}),
    ),
    Recipe(
        since=(0,),
        args=("--gpu-memory-utilization", "0.9"),
        env=MappingProxyType(
            {
                "VLLM_ROCM_USE_AITER": "1",
                # AITER's unified attention kernel, which handles GPT-OSS's sinks and windows.
                "VLLM_USE_AITER_UNIFIED_ATTENTION": "1",
                # AITER's MHA backend off, so attention goes through the unified kernel above.
                "VLLM_ROCM_USE_AITER_MHA": "0",
            }
        ),
    ),
)


def recipe_for(engine_version: str | None) -> Recipe:
    """The recipe of `engine_version` (None: the current one)."""
    if engine_version is None:
        return RECIPES[0]
    release = version_tuple(engine_version)
    return next(recipe for recipe in RECIPES if release >= recipe.since)


class VllmAdapter:
    """`vllm serve` as a subprocess, one tensor-parallel rank per GPU in the spec."""

    kind: ClassVar[EngineKind] = EngineKind.VLLM
    health_path: ClassVar[str] = "/health"
    version_path: ClassVar[str] = "/version"
    metric_names: ClassVar[MetricNames] = METRIC_NAMES

    def launch_command(self, spec: LaunchSpec) -> LaunchCommand:
        recipe = recipe_for(spec.engine_version)
        checkpoint = CHECKPOINTS.get(spec.generation) if spec.model == GPT_OSS_120B else None
        argv = (
            "vllm", "serve", checkpoint or spec.model,
            *(("--served-model-name", spec.model) if checkpoint else ()),
            "--host", spec.host,
            "--port", str(spec.port),
            "--tensor-parallel-size", str(len(spec.gpu_indices)),
            *COMMON_ARGS,
            *recipe.args,
            *spec.extra_args,
        )  # fmt: skip
        # HIP_VISIBLE_DEVICES pins the replica to its GPUs (ROCm's CUDA_VISIBLE_DEVICES).
        return LaunchCommand(argv, {"HIP_VISIBLE_DEVICES": spec.visible_devices, **recipe.env})

    def parse_version(self, body: str) -> str:
        return version_from_json(body)

    def parse_load(self, exposition_text: str, now_s: float) -> ReplicaLoad:
        return parse_replica_load(exposition_text, self.metric_names, now_s)
