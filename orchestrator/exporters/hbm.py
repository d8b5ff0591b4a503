"""HBM collector: VRAM size and use, busy share and identity of each amdgpu card.

Reads `class/drm/card<N>/device/{mem_info_vram_total,mem_info_vram_used,gpu_busy_percent,
product_name,device}`. The generation comes from the PCI device id first (the reliable spelling;
board product names vary) and the product name second, through `core.generations`.
"""

from __future__ import annotations

import re

from orchestrator.core.errors import UnknownGenerationError
from orchestrator.core.generations import parse_generation
from orchestrator.exporters import names as n
from orchestrator.exporters.samples import Reading
from orchestrator.exporters.sysfs import MalformedFile, SysfsRoot

DRM = "class/drm"
UNKNOWN_GENERATION = "unknown"
_CARD = re.compile(r"card(\d+)")


def gpu_generation(device_id: str | None, product_name: str | None) -> str:
    """The generation's name (`MI355X`), or `unknown` when neither spelling is recognised: a
    card we cannot place (a display adapter, a newer part) is still exported, not an error."""
    for spelling in (device_id, product_name):
        if spelling:
            try:
                return parse_generation(spelling).value
            except UnknownGenerationError:
                continue
    return UNKNOWN_GENERATION


class HbmCollector:
    """Reads every `card<N>` of one node at each call of `read()`; `gpu` is the card index."""

    name = "hbm"

    def __init__(self, sysfs: SysfsRoot) -> None:
        self.sysfs = sysfs

    def read(self) -> Reading:
        reading = Reading()
        for entry in self.sysfs.list_dir(DRM):
            card = _CARD.fullmatch(entry)
            if card is not None:
                self._read_card(reading, card.group(1), f"{DRM}/{entry}/device")
        return reading

    def _read_card(self, reading: Reading, gpu: str, base: str) -> None:
        product_name, device_id = card_identity(self.sysfs, reading, base)
        if product_name is None and device_id is None:
            return
        generation = gpu_generation(device_id, product_name)
        labels = (gpu, generation)
        reading.add(n.GPU_INFO, (gpu, product_name or "", device_id or "", generation), 1)
        for metric, file, per_unit in (
            (n.GPU_HBM_TOTAL, "mem_info_vram_total", 1),
            (n.GPU_HBM_USED, "mem_info_vram_used", 1),
            (n.GPU_BUSY, "gpu_busy_percent", 100),  # percent → ratio
        ):
            try:
                value = self.sysfs.read_int(f"{base}/{file}")
            except MalformedFile as error:
                reading.malformed.append(error)
                continue
            if value is not None:
                reading.add(metric, labels, value if per_unit == 1 else value / per_unit)


def card_identity(sysfs: SysfsRoot, reading: Reading, base: str) -> tuple[str | None, str | None]:
    """A card's (product name, PCI device id) under `base` (`class/drm/card<N>/device`)."""
    return _text(sysfs, reading, f"{base}/product_name"), _device_id(
        sysfs, reading, f"{base}/device"
    )


def _text(sysfs: SysfsRoot, reading: Reading, rel: str) -> str | None:
    try:
        text = sysfs.read_text(rel)
    except MalformedFile as error:
        reading.malformed.append(error)
        return None
    return text.strip() if text and text.strip() else None


def _device_id(sysfs: SysfsRoot, reading: Reading, rel: str) -> str | None:
    """The PCI device id as the AMD GPU operator labels it: four lowercase hex digits."""
    text = _text(sysfs, reading, rel)
    if text is None:
        return None
    if re.fullmatch(r"(0x)?[0-9a-fA-F]{1,4}", text) is None:
        reading.malformed.append(MalformedFile(rel, f"expected a PCI id, found {text[:40]!r}"))
        return None
    return f"{int(text.removeprefix('0x').removeprefix('0X'), 16):04x}"
