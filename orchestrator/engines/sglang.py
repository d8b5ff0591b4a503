"""SGLang on ROCm, serving GPT-OSS-120B."""

from __future__ import annotations

from types import MappingProxyType
from typing import ClassVar, Final

from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines.base import (
    LaunchCommand,
    LaunchSpec,
    MetricNames,
    Series,
    version_from_json,
)
from orchestrator.engines.metrics import parse_replica_load

_REALTIME_TOKENS: Final = "sglang:realtime_tokens_total"

METRIC_NAMES: Final = MetricNames(
    running=(Series("sglang:num_running_reqs"),),
    waiting=(Series("sglang:num_queue_reqs"),),
    # Share of the KV token pool in use: a ratio in [0, 1].
    kv_cache_usage=Series("sglang:token_usage"),
    # SGLang's `prompt_tokens_total` and `generation_tokens_total` move only when a request
    # finishes, so over a long decode they show no rate and then a jump; its per-step counter,
    # split by mode, moves with the work. Prompt tokens are the ones prefilled by compute: cached
    # ones cost no step time, which is what the capacity estimator fits.
    generation_tokens=(Series(_REALTIME_TOKENS, {"mode": "decode"}),),
    prompt_tokens=(Series(_REALTIME_TOKENS, {"mode": "prefill_compute"}),),
    # The scheduler of each data-parallel rank reports its own batch (summed); tensor- and
    # pipeline-parallel ranks of one scheduler report the same one.
    replicated_labels=frozenset({"tp_rank", "pp_rank", "moe_ep_rank"}),
)

SERVER_ARGS: Final = (
    "--kv-cache-dtype", "fp8_e4m3",
    "--enable-metrics",
    "--context-length", "131072",
)  # fmt: skip

ROCM_ENV: Final = MappingProxyType(
    {
        # AITER (AMD's kernel library) for attention, MoE and GEMM on ROCm.
        "SGLANG_USE_AITER": "1",
    }
)


class SglangAdapter:
    """`sglang.launch_server` as a subprocess, one tensor-parallel rank per GPU in the spec."""

    kind: ClassVar[EngineKind] = EngineKind.SGLANG
    health_path: ClassVar[str] = "/health"
    version_path: ClassVar[str] = "/get_server_info"
    metric_names: ClassVar[MetricNames] = METRIC_NAMES

    def launch_command(self, spec: LaunchSpec) -> LaunchCommand:
        argv = (
            "python3", "-m", "sglang.launch_server",
            "--model-path", spec.model,
            "--host", spec.host,
            "--port", str(spec.port),
            "--tp", str(len(spec.gpu_indices)),
            *SERVER_ARGS,
            *spec.extra_args,
        )  # fmt: skip
        # HIP_VISIBLE_DEVICES pins the replica to its GPUs (ROCm's CUDA_VISIBLE_DEVICES).
        return LaunchCommand(argv, {"HIP_VISIBLE_DEVICES": spec.visible_devices, **ROCM_ENV})

    def parse_version(self, body: str) -> str:
        return version_from_json(body)

    def parse_load(self, exposition_text: str, now_s: float) -> ReplicaLoad:
        return parse_replica_load(exposition_text, self.metric_names, now_s)
