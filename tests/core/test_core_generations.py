"""Every spelling of a GPU that users meet names one generation; anything else is a quoted error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.errors import ErrorCode, UnknownGenerationError
from orchestrator.core.generations import GENERATIONS, Generation, parse_generation, spec_of
from orchestrator.core.openai_errors import openai_error

SPELLINGS = [
    # Ray accelerator types
    ("AMD-Instinct-MI300X-OAM", Generation.MI300X),
    ("AMD-Instinct-MI325X-OAM", Generation.MI325X),
    ("AMD-Instinct-MI350X-OAM", Generation.MI350X),
    ("AMD-Instinct-MI355X-OAM", Generation.MI355X),
    # AMD GPU operator `amd.com/gpu.device-id`, bare and as PCI ids
    ("74a1", Generation.MI300X),
    ("0x74a1", Generation.MI300X),
    ("74A1", Generation.MI300X),
    ("74a5", Generation.MI325X),
    ("75a0", Generation.MI350X),
    ("75a3", Generation.MI355X),
    ("0x75A3", Generation.MI355X),
    # AMD GPU operator `amd.com/gpu.product-name`: underscores or spaces, the X sometimes dropped
    ("AMD_Instinct_MI300X_OAM", Generation.MI300X),
    ("AMD_Instinct_MI355_OAM", Generation.MI355X),
    ("AMD_Instinct_MI355X_OAM", Generation.MI355X),
    ("AMD Instinct MI300X OAM", Generation.MI300X),
    ("AMD_Instinct_MI325X", Generation.MI325X),
    # sysfs product_name, newline included
    ("AMD Instinct MI300X", Generation.MI300X),
    ("AMD Instinct MI355X\n", Generation.MI355X),
    # what people type
    ("MI300X", Generation.MI300X),
    ("mi355x", Generation.MI355X),
    ("  MI350X  ", Generation.MI350X),
    ("MI300", Generation.MI300X),
]


@pytest.mark.parametrize(("spelling", "generation"), SPELLINGS)
def test_every_spelling_users_meet_names_its_generation(
    spelling: str, generation: Generation
) -> None:
    assert parse_generation(spelling) is generation


@pytest.mark.parametrize(
    "spelling",
    [
        "MI300A",  # an APU: a different part that shares the model number
        "AMD Instinct MI300A",
        "MI250X",
        "AMD-Instinct-MI250X-OAM",
        "H100",
        "NVIDIA-H100-80GB-HBM3",
        "",
        "   ",
        "74a2",  # a PCI id next to MI300X's, but not one we know
        "0x74a2",
        "MI3000X",
    ],
)
def test_an_unknown_spelling_is_an_error_that_quotes_it(spelling: str) -> None:
    with pytest.raises(UnknownGenerationError) as caught:
        parse_generation(spelling)
    assert repr(spelling) in str(caught.value)
    assert caught.value.raw == spelling
    assert "MI300X" in str(caught.value) and "MI355X" in str(caught.value)


def test_an_unknown_generation_reaches_an_openai_client_as_a_400_bad_request() -> None:
    with pytest.raises(UnknownGenerationError) as caught:
        parse_generation("H100")
    status, body = openai_error(caught.value)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert status == 400
    assert body["error"]["type"] == "BadRequestError"
    assert "'H100'" in body["error"]["message"]


@given(st.text())
def test_arbitrary_text_either_names_a_generation_or_raises_the_quoting_error(text: str) -> None:
    try:
        parsed = parse_generation(text)
    except UnknownGenerationError as error:
        assert repr(text) in str(error)
    else:
        assert parsed in GENERATIONS


@given(
    st.sampled_from(list(Generation)),
    st.sampled_from(["ray_accelerator_type", "k8s_product_name", "device_id"]),
    st.text(alphabet=" \t\n", max_size=3),
)
def test_each_generation_round_trips_through_its_own_labels(
    generation: Generation, label: str, padding: str
) -> None:
    spelling = getattr(GENERATIONS[generation], label)
    assert parse_generation(padding + spelling + padding) is generation


@pytest.mark.parametrize("generation", list(Generation))
def test_spec_of_accepts_the_enum_or_any_spelling_and_gives_the_same_row(
    generation: Generation,
) -> None:
    spec = GENERATIONS[generation]
    assert spec_of(generation) is spec
    assert spec_of(spec.ray_accelerator_type) is spec
    assert spec_of("0x" + spec.device_id) is spec


def test_native_fp4_generations_serve_mxfp4_and_the_rest_serve_fp8_experts() -> None:
    assert GENERATIONS[Generation.MI355X].expert_weights == "mxfp4"
    assert GENERATIONS[Generation.MI350X].expert_weights == "mxfp4"
    assert GENERATIONS[Generation.MI300X].expert_weights == "fp8_experts"
    assert GENERATIONS[Generation.MI325X].expert_weights == "fp8_experts"
