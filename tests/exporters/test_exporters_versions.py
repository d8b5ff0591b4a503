"""The versions collector on the three fixture nodes: ROCm, amdgpu driver, VBIOS and firmware."""

from __future__ import annotations

from pathlib import Path

from exporter_fixtures import BY_DRIVER

from orchestrator.exporters import names as n
from orchestrator.exporters.sysfs import SysfsRoot
from orchestrator.exporters.versions import VersionsCollector


def collect(driver: str) -> dict[str, list[tuple[str, ...]]]:
    fixture = BY_DRIVER[driver]
    reading = VersionsCollector(
        SysfsRoot(fixture.directory / "sys"), fixture.directory / "rocm" / ".info" / "version"
    ).read()
    assert reading.malformed == []
    out: dict[str, list[tuple[str, ...]]] = {}
    for sample in reading.samples:
        out.setdefault(sample.metric, []).append(sample.labels)
    return out


def test_each_node_reports_its_rocm_and_driver_versions() -> None:
    assert collect("mlx5")[n.NODE_SOFTWARE_INFO] == [("6.3.1-48", "6.10.5")]
    assert collect("bnxt_re")[n.NODE_SOFTWARE_INFO] == [("7.0.2-56", "6.14.14")]
    # The kernel's in-tree amdgpu has no module version file: the label stays empty.
    assert collect("ionic")[n.NODE_SOFTWARE_INFO] == [("7.1.0-24", "")]


def test_each_gpu_reports_its_vbios_and_firmware_components() -> None:
    mi300x = [("vbios", "113-M3000100-102"), ("mec", "0x0000009b"), ("smc", "0x00557000")]
    assert collect("mlx5")[n.GPU_FIRMWARE_INFO] == [
        (gpu, "MI300X", *component) for gpu in ("0", "1") for component in mi300x
    ]
    assert collect("ionic")[n.GPU_FIRMWARE_INFO] == [
        ("0", "MI355X", "vbios", "113-M3550100-105"),
        ("0", "MI355X", "smc", "0x00665100"),
    ]  # card1 shows neither: no data, not an error


def test_a_node_without_rocm_or_driver_files_exports_no_software_sample(tmp_path: Path) -> None:
    reading = VersionsCollector(SysfsRoot(tmp_path), tmp_path / "missing" / "version").read()
    assert reading.samples == [] and reading.malformed == []


def test_a_garbled_version_file_is_malformed_not_a_label(tmp_path: Path) -> None:
    rocm = tmp_path / "version"
    rocm.write_text("<html>not a version</html>\n")
    reading = VersionsCollector(SysfsRoot(tmp_path), rocm).read()
    assert reading.samples == []
    assert [error.path for error in reading.malformed] == [str(rocm)]
