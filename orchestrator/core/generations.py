"""GPU generations as data, and the one place where vendor spellings become a generation.

Users meet a generation under many names: Ray accelerator types (`AMD-Instinct-MI355X-OAM`), AMD GPU
operator node labels (`amd.com/gpu.device-id=75a3`, `AMD_Instinct_MI355_OAM`), sysfs `product_name`
("AMD Instinct MI300X"), PCI ids (`0x74a1`). `parse_generation` accepts all of them; anything else
is an error that quotes the input. Figures come from vendor specifications (see
`fleet/data/calibration.yaml` for sources); a new generation is a new row, never a branch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from orchestrator.core.errors import UnknownGenerationError


class Generation(StrEnum):
    MI300X = "MI300X"
    MI325X = "MI325X"
    MI350X = "MI350X"
    MI355X = "MI355X"


@dataclass(frozen=True, slots=True)
class GenerationSpec:
    """Hardware facts for one GPU of a generation.

    `dense_flops_per_s` is the dense peak at the precision GPT-OSS experts run at on this
    generation: MXFP4 where the hardware has native FP4 (CDNA4), FP8 otherwise.
    `expert_weights` names the weight format served: "mxfp4" or "fp8_experts".
    """

    generation: Generation
    device_id: str
    ray_accelerator_type: str
    hbm_bytes: float
    hbm_bytes_per_s: float
    dense_flops_per_s: float
    native_fp4: bool
    tdp_watts: float | None
    architecture: str

    @property
    def expert_weights(self) -> str:
        return "mxfp4" if self.native_fp4 else "fp8_experts"

    @property
    def k8s_product_name(self) -> str:
        """The AMD GPU operator's `amd.com/gpu.product-name` spelling."""
        return f"AMD_Instinct_{self.generation.value}_OAM"


GENERATIONS: Final = MappingProxyType(
    {
        spec.generation: spec
        for spec in (
            GenerationSpec(
                Generation.MI300X,
                "74a1",
                "AMD-Instinct-MI300X-OAM",
                hbm_bytes=192.0e9,
                hbm_bytes_per_s=5.3e12,
                dense_flops_per_s=2.6e15,
                native_fp4=False,
                tdp_watts=750,
                architecture="CDNA3",
            ),
            GenerationSpec(
                Generation.MI325X,
                "74a5",
                "AMD-Instinct-MI325X-OAM",
                hbm_bytes=256.0e9,
                hbm_bytes_per_s=6.0e12,
                dense_flops_per_s=2.6e15,
                native_fp4=False,
                tdp_watts=1000,
                architecture="CDNA3",
            ),
            GenerationSpec(
                Generation.MI350X,
                "75a0",
                "AMD-Instinct-MI350X-OAM",
                hbm_bytes=288.0e9,
                hbm_bytes_per_s=8.0e12,
                dense_flops_per_s=9.2e15,
                native_fp4=True,
                tdp_watts=1000,
                architecture="CDNA4",
            ),
            GenerationSpec(
                Generation.MI355X,
                "75a3",
                "AMD-Instinct-MI355X-OAM",
                hbm_bytes=288.0e9,
                hbm_bytes_per_s=8.0e12,
                dense_flops_per_s=10.1e15,
                native_fp4=True,
                tdp_watts=1400,
                architecture="CDNA4",
            ),
        )
    }
)

_BY_DEVICE_ID: Final = {spec.device_id: spec.generation for spec in GENERATIONS.values()}
# "mi355x", "mi355" (operator product names drop the X), "mi300" (MI300A is a different part and
# spells its suffix, so it stays unknown).
_MODEL_NUMBER = re.compile(r"mi(\d{3})(x?)(?![a-z0-9])")
_HEX_ID = re.compile(r"(?:0x)?([0-9a-f]{4})")


def parse_generation(raw: str) -> Generation:
    """Return the generation that `raw` names, in any spelling users meet; raise otherwise."""
    text = raw.strip().lower()
    hex_match = _HEX_ID.fullmatch(text)
    if hex_match and hex_match.group(1) in _BY_DEVICE_ID:
        return _BY_DEVICE_ID[hex_match.group(1)]
    model = _MODEL_NUMBER.search(re.sub(r"[^a-z0-9]+", " ", text))
    if model and f"MI{model.group(1)}X" in Generation.__members__:
        return Generation[f"MI{model.group(1)}X"]
    raise UnknownGenerationError(raw, [g.value for g in Generation])


def spec_of(generation: Generation | str) -> GenerationSpec:
    """The hardware row for a generation, given as an enum or any accepted spelling."""
    if not isinstance(generation, Generation):
        generation = parse_generation(generation)
    return GENERATIONS[generation]
