"""vLLM on ROCm, serving GPT-OSS-120B with the ROCm GPT-OSS recipe settings."""

from __future__ import annotations

from types import MappingProxyType
from typing import ClassVar, Final

from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines.base import LaunchCommand, LaunchSpec, MetricNames, Series
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

SERVE_ARGS: Final = (
    "--kv-cache-dtype", "fp8",
    "--max-model-len", "131072",
    "--gpu-memory-utilization", "0.9",
)  # fmt: skip

ROCM_ENV: Final = MappingProxyType(
    {
        # AITER (AMD's kernel library) for MoE, GEMM and norms; the recipe's main speed-up.
        "VLLM_ROCM_USE_AITER": "1",
        # AITER's unified attention kernel, which handles GPT-OSS's sinks and sliding windows.
        "VLLM_USE_AITER_UNIFIED_ATTENTION": "1",
        # Keep AITER's MHA backend off so attention goes through the unified kernel above.
        "VLLM_ROCM_USE_AITER_MHA": "0",
    }
)


class VllmAdapter:
    """`vllm serve` as a subprocess, one tensor-parallel rank per GPU in the spec."""

    kind: ClassVar[EngineKind] = EngineKind.VLLM
    health_path: ClassVar[str] = "/health"
    metric_names: ClassVar[MetricNames] = METRIC_NAMES

    def launch_command(self, spec: LaunchSpec) -> LaunchCommand:
        argv = (
            "vllm", "serve", spec.model,
            "--host", spec.host,
            "--port", str(spec.port),
            "--tensor-parallel-size", str(len(spec.gpu_indices)),
            *SERVE_ARGS,
            *spec.extra_args,
        )  # fmt: skip
        # HIP_VISIBLE_DEVICES pins the replica to its GPUs (ROCm's CUDA_VISIBLE_DEVICES).
        return LaunchCommand(argv, {"HIP_VISIBLE_DEVICES": spec.visible_devices, **ROCM_ENV})

    def parse_load(self, exposition_text: str, now_s: float) -> ReplicaLoad:
        return parse_replica_load(exposition_text, self.metric_names, now_s)
