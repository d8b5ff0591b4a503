"""HbmCollector: HBM bytes, busy ratio and the generation from the PCI id or product name."""

from __future__ import annotations

from pathlib import Path

import pytest
from exporter_fixtures import BY_DRIVER, exporter_for

from orchestrator.exporters import names as n
from orchestrator.exporters.hbm import HbmCollector, gpu_generation
from orchestrator.exporters.samples import Sample
from orchestrator.exporters.sysfs import SysfsRoot
from orchestrator.exporters.tree import NodeTreeBuilder

GIB = 1024**3


def by_gpu(samples: list[Sample], metric: str) -> dict[str, float]:
    return {s.label_map()["gpu"]: s.value for s in samples if s.metric == metric}


def test_hbm_bytes_and_busy_ratio_per_card() -> None:
    samples = exporter_for(BY_DRIVER["mlx5"]).scrape().samples
    assert by_gpu(samples, n.GPU_HBM_TOTAL) == {"0": 205_822_885_888, "1": 205_822_885_888}
    assert by_gpu(samples, n.GPU_HBM_USED) == {"0": 150 * GIB, "1": 151 * GIB}
    assert by_gpu(samples, n.GPU_BUSY) == {"0": 0.87, "1": 0.77}
    generations = {s.label_map()["gpu_generation"] for s in samples if s.metric.startswith("gpu_")}
    assert generations == {"MI300X"}


@pytest.mark.parametrize(
    ("device_id", "product_name", "expected"),
    [
        ("74a1", None, "MI300X"),
        ("75a3", "something else", "MI355X"),  # the PCI id decides first
        ("75b3", "AMD_Instinct_MI355_OAM", "MI355X"),  # a VF id we do not list: the name decides
        (None, "AMD Instinct MI300X", "MI300X"),
        ("1002", "Radeon Display", "unknown"),
        (None, None, "unknown"),
    ],
)
def test_generation_from_pci_id_then_product_name(
    device_id: str | None, product_name: str | None, expected: str
) -> None:
    assert gpu_generation(device_id, product_name) == expected


def test_gpu_info_names_product_device_id_and_generation_and_skips_connectors() -> None:
    samples = exporter_for(BY_DRIVER["ionic"]).scrape().samples
    info = [s.label_map() for s in samples if s.metric == n.GPU_INFO]
    assert info == [
        {"gpu": "0", "product_name": "AMD_Instinct_MI355_OAM", "device_id": "75a3",
         "gpu_generation": "MI355X"},
        {"gpu": "1", "product_name": "AMD_Instinct_MI355_OAM", "device_id": "75b3",
         "gpu_generation": "MI355X"},
    ]  # fmt: skip


def test_a_malformed_vram_file_loses_only_that_series(tmp_path: Path) -> None:
    tree = NodeTreeBuilder(tmp_path)
    tree.gpu(
        0, product_name="AMD Instinct MI355X", device_id="0x75a3",
        vram_total_bytes=288 * 10**9, vram_used_bytes=10, busy_percent=50,
    )  # fmt: skip
    tree.write_value("class/drm/card0/device/mem_info_vram_used", "lots")
    reading = HbmCollector(SysfsRoot(tmp_path)).read()
    assert [e.path for e in reading.malformed] == ["class/drm/card0/device/mem_info_vram_used"]
    assert by_gpu(reading.samples, n.GPU_HBM_TOTAL) == {"0": 288 * 10**9}
    assert by_gpu(reading.samples, n.GPU_HBM_USED) == {}
    assert by_gpu(reading.samples, n.GPU_BUSY) == {"0": 0.5}


def test_a_card_without_identity_files_is_not_a_gpu(tmp_path: Path) -> None:
    (tmp_path / "class/drm/card0/device").mkdir(parents=True)
    (tmp_path / "class/drm/renderD128").mkdir(parents=True)
    assert HbmCollector(SysfsRoot(tmp_path)).read().samples == []
