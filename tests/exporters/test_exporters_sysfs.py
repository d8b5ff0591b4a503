"""SysfsRoot: missing files are no data, garbage is an error that names the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.exporters.sysfs import MalformedFile, SysfsRoot, resolve_sysfs_root


def write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_read_text_strips_the_trailing_newline_and_missing_files_are_none(tmp_path: Path) -> None:
    write(tmp_path, "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n")
    sysfs = SysfsRoot(tmp_path)
    assert sysfs.read_text("class/infiniband/mlx5_0/ports/1/state") == "4: ACTIVE"
    assert sysfs.read_text("class/infiniband/mlx5_0/ports/1/phys_state") is None
    assert sysfs.read_text("class/infiniband/mlx5_0/ports") is None  # a directory is not a file


def test_read_int_accepts_decimal_and_pci_hex(tmp_path: Path) -> None:
    write(tmp_path, "counters/port_xmit_data", "18446744073709551615\n")
    write(tmp_path, "drm/device", "0x75a3\n")
    sysfs = SysfsRoot(tmp_path)
    assert sysfs.read_int("counters/port_xmit_data") == 2**64 - 1
    assert sysfs.read_int("drm/device") == 0x75A3
    assert sysfs.read_int("counters/missing") is None


@pytest.mark.parametrize("garbage", ["", "N/A\n", "12 34\n", "0xZZ\n", "1.5\n"])
def test_read_int_on_garbage_raises_malformed_file_naming_the_path(
    tmp_path: Path, garbage: str
) -> None:
    rel = "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    write(tmp_path, rel, garbage)
    with pytest.raises(MalformedFile) as caught:
        SysfsRoot(tmp_path).read_int(rel)
    assert caught.value.path == rel
    assert rel in str(caught.value)


def test_non_utf8_text_is_malformed_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "product_name").write_bytes(b"\xff\xfe\n")
    with pytest.raises(MalformedFile):
        SysfsRoot(tmp_path).read_text("product_name")


def test_list_dir_is_sorted_and_empty_when_missing(tmp_path: Path) -> None:
    for name in ("mlx5_1", "mlx5_0", "mlx5_10"):
        (tmp_path / "class/infiniband" / name).mkdir(parents=True)
    sysfs = SysfsRoot(tmp_path)
    assert sysfs.list_dir("class/infiniband") == ["mlx5_0", "mlx5_1", "mlx5_10"]
    assert sysfs.list_dir("class/drm") == []


def test_link_name_is_the_driver_a_device_is_bound_to(tmp_path: Path) -> None:
    device = tmp_path / "class/infiniband/rocep68s0/device"
    device.mkdir(parents=True)
    (device / "driver").symlink_to("../../../../bus/pci/drivers/ionic")
    sysfs = SysfsRoot(tmp_path)
    assert sysfs.link_name("class/infiniband/rocep68s0/device/driver") == "ionic"
    assert sysfs.link_name("class/infiniband/rocep68s0/device") is None


def test_a_filesystem_root_resolves_to_its_sys_directory(tmp_path: Path) -> None:
    (tmp_path / "sys/class/net").mkdir(parents=True)
    assert resolve_sysfs_root(tmp_path) == tmp_path / "sys"
    assert resolve_sysfs_root(tmp_path / "sys") == tmp_path / "sys"
