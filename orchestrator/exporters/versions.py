"""Versions collector: the node's ROCm and amdgpu driver versions, and each GPU's firmware.

So capacity can be read per software version (a ROCm release can move a generation's capacity by
tens of percent). Reads the ROCm install's version file (`<rocm>/.info/version`, outside sysfs,
its path given), `module/amdgpu/version` (the out-of-tree amdgpu driver; absent when the kernel's
own driver is loaded), and `class/drm/card<N>/device/{vbios_version,fw_version/*_fw_version}`.
Missing files are no data; a node that shows neither version exports no software sample.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.exporters import names as n
from orchestrator.exporters.hbm import card_identity, gpu_generation
from orchestrator.exporters.samples import Reading
from orchestrator.exporters.sysfs import MalformedFile, SysfsRoot

DRM = "class/drm"
AMDGPU_VERSION = "module/amdgpu/version"
FW_SUFFIX = "_fw_version"
DEFAULT_ROCM_VERSION_FILE = "/opt/rocm/.info/version"
_CARD = re.compile(r"card(\d+)")
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}")


class VersionsCollector:
    """`rocm_version_file` None: the node has no ROCm install to read (its label stays empty)."""

    name = "versions"

    def __init__(self, sysfs: SysfsRoot, rocm_version_file: Path | str | None) -> None:
        self.sysfs = sysfs
        self.rocm_version_file = None if rocm_version_file is None else Path(rocm_version_file)

    def read(self) -> Reading:
        reading = Reading()
        rocm = self._rocm_version(reading)
        driver = self._version(reading, AMDGPU_VERSION)
        if rocm or driver:
            reading.add(n.NODE_SOFTWARE_INFO, (rocm or "", driver or ""), 1)
        for entry in self.sysfs.list_dir(DRM):
            card = _CARD.fullmatch(entry)
            if card is not None:
                self._read_card(reading, card.group(1), f"{DRM}/{entry}/device")
        return reading

    def _read_card(self, reading: Reading, gpu: str, base: str) -> None:
        found = []
        vbios = self._version(reading, f"{base}/vbios_version")
        if vbios:
            found.append(("vbios", vbios))
        for file in self.sysfs.list_dir(f"{base}/fw_version"):
            if file.endswith(FW_SUFFIX):
                version = self._version(reading, f"{base}/fw_version/{file}")
                if version:
                    found.append((file.removesuffix(FW_SUFFIX), version))
        if not found:
            return
        product_name, device_id = card_identity(self.sysfs, reading, base)
        generation = gpu_generation(device_id, product_name)
        for component, version in found:
            reading.add(n.GPU_FIRMWARE_INFO, (gpu, generation, component, version), 1)

    def _version(self, reading: Reading, rel: str) -> str | None:
        try:
            text = self.sysfs.read_text(rel)
        except MalformedFile as error:
            reading.malformed.append(error)
            return None
        return _checked(reading, rel, text)

    def _rocm_version(self, reading: Reading) -> str | None:
        if self.rocm_version_file is None:
            return None
        try:
            text = self.rocm_version_file.read_text(errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            reading.malformed.append(MalformedFile(str(self.rocm_version_file), str(error)))
            return None
        return _checked(reading, str(self.rocm_version_file), text)


def _checked(reading: Reading, where: str, text: str | None) -> str | None:
    """The first line of `text` when it looks like a version; malformed otherwise."""
    if text is None or not text.strip():
        return None
    line = text.strip().splitlines()[0].strip()
    if _VERSION.fullmatch(line) is None:
        reading.malformed.append(MalformedFile(where, f"expected a version, found {line[:40]!r}"))
        return None
    return line
