"""Launch commands: the flags and environment each engine is started with."""

from __future__ import annotations

import sys

import pytest

from orchestrator.core.generations import Generation
from orchestrator.engines import LaunchSpec, NotLaunchableError, adapter_for

MODEL = "openai/gpt-oss-120b"


def _spec(**overrides: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "model": MODEL,
        "host": "10.0.0.7",
        "port": 8100,
        "generation": Generation.MI355X,
    }
    return LaunchSpec(**{**fields, **overrides})  # type: ignore[arg-type]


def _flag(argv: tuple[str, ...], flag: str) -> str:
    """The value following `flag`; the last one wins, as with argparse."""
    positions = [i for i, arg in enumerate(argv) if arg == flag]
    assert positions, f"{flag} missing from {argv}"
    return argv[positions[-1] + 1]


def test_vllm_serves_gpt_oss_on_one_gpu_with_the_current_rocm_recipe_flags() -> None:
    argv = adapter_for("vllm").launch_command(_spec(generation=Generation.MI300X)).argv

    assert argv[:3] == ("vllm", "serve", MODEL)
    assert "--served-model-name" not in argv
    assert _flag(argv, "--host") == "10.0.0.7"
    assert _flag(argv, "--port") == "8100"
    assert _flag(argv, "--tensor-parallel-size") == "1"
    assert _flag(argv, "--kv-cache-dtype") == "fp8"
    assert _flag(argv, "--max-model-len") == "131072"
    assert _flag(argv, "--attention-backend") == "ROCM_AITER_UNIFIED_ATTN"
    assert _flag(argv, "--gpu-memory-utilization") == "0.95"
    assert _flag(argv, "--block-size") == "64"


def test_vllm_on_mi355x_serves_amds_mxfp4_checkpoint_under_the_published_name() -> None:
    argv = adapter_for("vllm").launch_command(_spec()).argv

    assert argv[:3] == ("vllm", "serve", "amd/gpt-oss-120b-w-mxfp4-a-fp8")
    assert _flag(argv, "--served-model-name") == MODEL
    other = adapter_for("vllm").launch_command(_spec(model="my/finetune")).argv
    assert other[2] == "my/finetune" and "--served-model-name" not in other


@pytest.mark.parametrize("version", [None, "0.17.0", "0.18.1rc2", "0.10.1"])
def test_every_vllm_version_gets_the_tool_call_flags_responses_and_chat_tools_need(
    version: str | None,
) -> None:
    argv = adapter_for("vllm").launch_command(_spec(engine_version=version)).argv

    assert _flag(argv, "--tool-call-parser") == "openai"
    assert "--enable-auto-tool-choice" in argv


def test_vllm_environment_pins_the_gpu_and_turns_on_aiter() -> None:
    env = adapter_for("vllm").launch_command(_spec(gpu_indices=(5,))).env

    assert dict(env) == {"HIP_VISIBLE_DEVICES": "5", "VLLM_ROCM_USE_AITER": "1"}


def test_vllm_before_0_17_gets_the_2025_rocm_recipe() -> None:
    command = adapter_for("vllm").launch_command(_spec(gpu_indices=(5,), engine_version="0.10.1"))

    assert dict(command.env) == {
        "HIP_VISIBLE_DEVICES": "5",
        "VLLM_ROCM_USE_AITER": "1",
        "VLLM_USE_AITER_UNIFIED_ATTENTION": "1",
        "VLLM_ROCM_USE_AITER_MHA": "0",
    }
    assert "--attention-backend" not in command.argv
    assert _flag(command.argv, "--gpu-memory-utilization") == "0.9"


def test_a_malformed_engine_version_is_refused() -> None:
    with pytest.raises(ValueError, match="engine_version"):
        _spec(engine_version="latest")


def test_sglang_serves_gpt_oss_on_one_gpu_with_fp8_kv_cache_and_metrics_on() -> None:
    command = adapter_for("sglang").launch_command(_spec(gpu_indices=(3,)))
    argv = command.argv

    assert argv[:3] == ("python3", "-m", "sglang.launch_server")
    assert _flag(argv, "--model-path") == MODEL
    assert _flag(argv, "--host") == "10.0.0.7"
    assert _flag(argv, "--port") == "8100"
    assert _flag(argv, "--tp") == "1"
    assert _flag(argv, "--kv-cache-dtype") == "fp8_e4m3"
    assert _flag(argv, "--context-length") == "131072"
    assert "--enable-metrics" in argv
    assert dict(command.env) == {"HIP_VISIBLE_DEVICES": "3", "SGLANG_USE_AITER": "1"}


@pytest.mark.parametrize(
    ("kind", "tp_flag"), [("vllm", "--tensor-parallel-size"), ("sglang", "--tp")]
)
def test_replica_given_two_gpus_sees_both_and_shards_across_them(kind: str, tp_flag: str) -> None:
    command = adapter_for(kind).launch_command(_spec(gpu_indices=(2, 3)))

    assert command.env["HIP_VISIBLE_DEVICES"] == "2,3"
    assert _flag(command.argv, tp_flag) == "2"


@pytest.mark.parametrize("kind", ["vllm", "sglang", "sim"])
def test_extra_args_come_last_so_they_override_the_defaults(kind: str) -> None:
    extra = ("--max-model-len", "32768", "--served-model-name", "gpt-oss")

    argv = adapter_for(kind).launch_command(_spec(extra_args=extra)).argv

    assert argv[-len(extra) :] == extra


def test_simulated_engine_runs_the_orchestrator_module_under_this_interpreter() -> None:
    command = adapter_for("sim").launch_command(_spec(time_scale=4.0, port=9001))

    assert command.argv[:5] == (sys.executable, "-m", "orchestrator", "sim", "serve")
    assert _flag(command.argv, "--generation") == "MI355X"
    assert _flag(command.argv, "--host") == "10.0.0.7"
    assert _flag(command.argv, "--port") == "9001"
    assert _flag(command.argv, "--time-scale") == "4.0"
    assert dict(command.env) == {}


def test_simulated_engine_without_a_time_scale_keeps_the_simulators_default() -> None:
    argv = adapter_for("sim").launch_command(_spec()).argv

    assert "--time-scale" not in argv


def test_external_replica_is_never_launched() -> None:
    with pytest.raises(NotLaunchableError, match="external replicas are not launched by us"):
        adapter_for("external").launch_command(_spec())


def test_launch_environment_cannot_be_changed_after_the_fact() -> None:
    env = adapter_for("vllm").launch_command(_spec()).env

    with pytest.raises(TypeError):
        env["HIP_VISIBLE_DEVICES"] = "7"  # type: ignore[index]


def test_generation_may_be_given_in_any_accepted_spelling() -> None:
    assert _spec(generation="AMD-Instinct-MI300X-OAM").generation is Generation.MI300X


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"gpu_indices": ()}, "gpu_indices"),
        ({"gpu_indices": (1, 1)}, "gpu_indices"),
        ({"gpu_indices": (-1,)}, "gpu_indices"),
        ({"time_scale": -1.0}, "time_scale"),
        ({"time_scale": float("nan")}, "time_scale"),
        ({"model": ""}, "model"),
        ({"host": ""}, "host"),
    ],
)
def test_launch_spec_rejects_bad_values_naming_the_field(
    overrides: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        _spec(**overrides)
