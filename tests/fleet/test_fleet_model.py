"""The capacity model: KV capacity from HBM, roofline step times, and the synthetic workload."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
import yaml

from orchestrator.core.generations import Generation
from orchestrator.fleet.figures import calibration_path, load_figures, parse_figures
from orchestrator.fleet.step_cost import StepCostModel, StepWork
from orchestrator.fleet.workload import WorkloadSampler

# Published figures, written out here so the model is checked against them rather than itself:
# HBM per GPU [amd], weights served [mlperf], 18432 B of FP8 KV per token, vLLM's 0.9 memory share.
PUBLISHED_HBM_AND_WEIGHTS_BYTES = {
    Generation.MI300X: (192e9, 119.0e9),
    Generation.MI325X: (256e9, 119.0e9),
    Generation.MI350X: (288e9, 65.25e9),
    Generation.MI355X: (288e9, 65.25e9),
}
KV_BYTES_PER_TOKEN = 18432
GPU_MEMORY_UTILIZATION = 0.9


def cost(generation: Generation) -> StepCostModel:
    return StepCostModel.for_generation(generation)


def decode(batch: int, context_per_sequence: int) -> StepWork:
    return StepWork(
        decode_sequences=batch, decode_context_tokens=batch * context_per_sequence, prefill_tokens=0
    )


def prefill(tokens: int) -> StepWork:
    return StepWork(
        decode_sequences=0,
        decode_context_tokens=0,
        prefill_tokens=tokens,
        prefill_attention_pairs=tokens * tokens / 2,
    )


# -- KV capacity -------------------------------------------------------------------------------


@pytest.mark.parametrize("generation", list(Generation))
def test_kv_capacity_is_the_hbm_left_after_the_weights_in_fp8_kv_tokens(
    generation: Generation,
) -> None:
    hbm_bytes, weights_bytes = PUBLISHED_HBM_AND_WEIGHTS_BYTES[generation]
    expected = (hbm_bytes * GPU_MEMORY_UTILIZATION - weights_bytes) / KV_BYTES_PER_TOKEN
    capacity = cost(generation).kv_capacity_tokens
    assert capacity > 0
    assert capacity == pytest.approx(expected, rel=0.01)


def test_mi355x_holds_over_three_times_the_kv_of_mi300x() -> None:
    # More HBM and FP4 experts that take half the room of FP8 ones.
    assert (
        cost(Generation.MI355X).kv_capacity_tokens > 3 * cost(Generation.MI300X).kv_capacity_tokens
    )


def test_a_gpu_too_small_for_the_weights_has_no_kv_capacity_and_says_so() -> None:
    mi300x = cost(Generation.MI300X)
    with_64_gb = replace(mi300x, spec=replace(mi300x.spec, hbm_bytes=64e9))
    with pytest.raises(ValueError, match="cannot hold the weights"):
        _ = with_64_gb.kv_capacity_tokens


def test_an_efficiency_outside_zero_to_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="sequence_efficiency"):
        StepCostModel.for_generation(Generation.MI300X, sequence_efficiency=0.0)
    with pytest.raises(ValueError, match="sequence_efficiency"):
        StepCostModel.for_generation(Generation.MI300X, sequence_efficiency=1.5)


# -- step time ---------------------------------------------------------------------------------


@pytest.mark.parametrize("generation", [Generation.MI300X, Generation.MI355X])
def test_a_step_takes_longer_with_a_bigger_batch(generation: Generation) -> None:
    model = cost(generation)
    times = [model.step_time_s(decode(batch, 2000)) for batch in (1, 8, 64, 256, 1024)]
    assert times == sorted(times)
    assert len(set(times)) == len(times)


@pytest.mark.parametrize("generation", [Generation.MI300X, Generation.MI355X])
def test_a_step_takes_longer_with_longer_contexts(generation: Generation) -> None:
    model = cost(generation)
    times = [model.step_time_s(decode(64, context)) for context in (100, 1000, 5000, 20000)]
    assert times == sorted(times)
    assert len(set(times)) == len(times)


@pytest.mark.parametrize("generation", [Generation.MI300X, Generation.MI355X])
def test_a_step_takes_longer_with_a_longer_prefill_chunk(generation: Generation) -> None:
    model = cost(generation)
    times = [model.step_time_s(prefill(tokens)) for tokens in (16, 512, 2048, 8192)]
    assert times == sorted(times)
    assert len(set(times)) == len(times)


def test_an_empty_step_takes_no_time_and_reads_nothing() -> None:
    model = cost(Generation.MI300X)
    assert model.step_time_s(decode(0, 0)) == 0.0
    assert model.weight_read_bytes(0) == 0.0


@pytest.mark.parametrize("generation", [Generation.MI300X, Generation.MI355X])
def test_one_decode_token_reads_a_small_share_of_the_experts_that_512_tokens_read(
    generation: Generation,
) -> None:
    # 4 of 128 experts per token: one token touches ~3% of the experts, 512 tokens nearly all.
    model = cost(generation)
    one = model.weight_read_bytes(1)
    many = model.weight_read_bytes(512)
    assert one < 0.15 * many
    assert many == pytest.approx(model.weight_bytes, rel=0.01)
    assert model.weight_read_bytes(2) > one


@pytest.mark.parametrize(
    "work",
    [
        decode(1, 1000),
        decode(64, 5000),
        decode(512, 6000),
        prefill(8192),
        StepWork(
            decode_sequences=256,
            decode_context_tokens=256 * 5000,
            prefill_tokens=2048,
            prefill_attention_pairs=2048 * 1024,
        ),
    ],
    ids=["one-decode", "decode-64", "decode-512", "prefill-8k", "mixed"],
)
def test_mi355x_does_the_same_step_faster_than_mi300x(work: StepWork) -> None:
    assert cost(Generation.MI355X).step_time_s(work) < cost(Generation.MI300X).step_time_s(work)


# -- workload ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def samples() -> list:
    return WorkloadSampler(seed=0).draw_many(50_000)


def test_sampled_lengths_have_the_published_means(samples: list) -> None:
    stats = load_figures().workload
    assert (stats.mean_input_tokens, stats.mean_output_tokens) == (5000, 1278)
    assert statistics.fmean(s.input_tokens for s in samples) == pytest.approx(5000, rel=0.02)
    assert statistics.fmean(s.output_tokens for s in samples) == pytest.approx(1278, rel=0.02)


def test_sampled_lengths_stay_within_the_published_maxima(samples: list) -> None:
    inputs = [s.input_tokens for s in samples]
    outputs = [s.output_tokens for s in samples]
    assert min(inputs) >= 1
    assert max(inputs) <= 15330
    assert min(outputs) >= 1
    assert max(outputs) <= 10240
    # The caps bind: the long tail reaches them rather than being cut well short.
    assert max(inputs) == 15330
    assert max(outputs) == 10240


def test_the_same_seed_draws_the_same_lengths() -> None:
    assert WorkloadSampler(seed=42).draw_many(200) == WorkloadSampler(seed=42).draw_many(200)


def test_different_seeds_draw_different_lengths() -> None:
    assert WorkloadSampler(seed=1).draw_many(200) != WorkloadSampler(seed=2).draw_many(200)


def _raw_figures() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(calibration_path().read_text())
    return loaded


def test_a_generation_without_an_mlperf_row_is_calibrated_on_its_published_ratio() -> None:
    figures = load_figures()
    mi355x = figures.measured[Generation.MI355X].offline_tokens_per_s
    assert figures.offline_target_tokens_per_s(Generation.MI350X) == pytest.approx(0.80 * mi355x)
    assert figures.offline_target_tokens_per_s(Generation.MI355X) == mi355x
    assert figures.offline_target_tokens_per_s(Generation.MI325X) is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"reference": "MI325X", "offline_ratio": 0.8}, "reference must have measured figures"),
        ({"reference": "MI355X", "offline_ratio": 0.0}, "offline_ratio"),
    ],
)
def test_a_relative_figure_without_a_measured_reference_or_a_sane_ratio_is_refused(
    row: dict[str, object], message: str
) -> None:
    raw = _raw_figures()
    raw["relative"] = {"MI350X": row}
    with pytest.raises(ValueError, match=message):
        parse_figures(raw)


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("model", "layerz", 36, r"model\.layerz: unknown key"),
        ("engine", "max_num_seqs", 2.5, r"engine\.max_num_seqs: .*fractional part"),
        ("workload", "samples", "many", r"workload\.samples: .*valid integer"),
        ("measured", "MI999X", {}, r"measured\.MI999X: .*unknown GPU generation 'MI999X'"),
    ],
)
def test_a_calibration_key_that_is_unknown_or_of_the_wrong_kind_is_refused_with_its_path(
    section: str, key: str, value: object, message: str
) -> None:
    raw = _raw_figures()
    raw[section][key] = value  # type: ignore[index]
    with pytest.raises(ValueError, match=message):
        parse_figures(raw)


def test_yaml_numbers_read_as_strings_become_the_fields_kinds() -> None:
    """YAML 1.1 reads `116.83e9` as a string; the record's field says it is a float."""
    figures = load_figures()
    assert figures.model.total_params == pytest.approx(116.83e9)
    assert isinstance(figures.model.layers, int) and figures.model.layers == 36
    assert figures.model.weights_bytes["mxfp4"] == pytest.approx(65.25e9)
