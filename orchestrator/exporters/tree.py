"""Write fake sysfs trees in the layout the collectors read: RDMA ports, netdevs, ethtool files
and amdgpu cards.

Tests build fixtures with it, the benchmark builds an 8-GPU, 8-NIC node, and the fabric
simulator's trees (`fabric/tree.py`) follow the same layout; each file is replaced atomically
(`core.files`), so a concurrent scrape never reads a half-written file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.core.files import atomic_write_text
from orchestrator.exporters.drivers import PORT_COUNTERS, DriverCounters


class NodeTreeBuilder:
    """Builds one node's tree under `root` (the fake `/sys`); ethtool text files go to
    `ethtool_dir` (default `<root>/ethtool`), where `FileEthtoolReader` looks for them."""

    def __init__(self, root: Path | str, ethtool_dir: Path | str | None = None) -> None:
        self.root = Path(root)
        self.ethtool_dir = Path(ethtool_dir) if ethtool_dir is not None else self.root / "ethtool"

    def write_value(self, rel: str, value: int | str) -> None:
        """Write one sysfs file (created with its directories), replacing it atomically."""
        atomic_write_text(self.root / rel, f"{value}\n")

    def rdma_port(
        self,
        device: str,
        driver: DriverCounters,
        *,
        port: int = 1,
        netdev: str,
        state: str = "4: ACTIVE",
        phys_state: str = "5: LinkUp",
        rate: str = "400 Gb/sec (4X NDR)",
        fw_ver: str = "28.42.1000",
        counters: Mapping[str, int] | None = None,
        hw_counters: Mapping[str, int] | None = None,
    ) -> None:
        """One RoCE port of `device` bound to `netdev`. `counters` and `hw_counters` default to
        every name the driver's row knows, at 0; pass them to write other names or values."""
        base = f"class/infiniband/{device}"
        link = self.root / base / "device" / "driver"
        if not link.is_symlink() and driver.kernel_drivers:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(f"../../../../bus/pci/drivers/{driver.kernel_drivers[0]}")
        self.write_value(f"{base}/fw_ver", fw_ver)
        ports = f"{base}/ports/{port}"
        for name, text in (
            ("state", state),
            ("phys_state", phys_state),
            ("rate", rate),
            ("link_layer", "Ethernet"),
            ("gid_attrs/ndevs/0", netdev),
        ):
            self.write_value(f"{ports}/{name}", text)
        port_counters = counters if counters is not None else dict.fromkeys(PORT_COUNTERS, 0)
        for name, value in port_counters.items():
            self.write_value(f"{ports}/counters/{name}", value)
        hw = hw_counters if hw_counters is not None else dict.fromkeys(driver.hw_counters, 0)
        for name, value in hw.items():
            self.write_value(f"{ports}/hw_counters/{name}", value)

    def netdev(
        self,
        name: str,
        *,
        operstate: str = "up",
        carrier_changes: int = 2,
        speed_mbit: int = 400_000,
    ) -> None:
        """A network interface under `class/net` (speed in Mbit/s, -1 when unknown)."""
        for file, value in (
            ("operstate", operstate),
            ("carrier_changes", carrier_changes),
            ("speed", speed_mbit),
        ):
            self.write_value(f"class/net/{name}/{file}", value)

    def ethtool(self, netdev: str, stats: Mapping[str, int]) -> None:
        """`ethtool -S <netdev>` output for `FileEthtoolReader`, replacing any earlier one."""
        lines = ["NIC statistics:", *(f"     {key}: {value}" for key, value in stats.items())]
        atomic_write_text(self.ethtool_dir / f"{netdev}.txt", "\n".join(lines) + "\n")

    def gpu(
        self,
        card: int,
        *,
        product_name: str,
        device_id: str,
        vram_total_bytes: int,
        vram_used_bytes: int,
        busy_percent: int,
    ) -> None:
        """An amdgpu card `card<N>` (device_id as sysfs writes it, e.g. `0x75a3`)."""
        base = f"class/drm/card{card}/device"
        for file, value in (
            ("product_name", product_name),
            ("device", device_id),
            ("mem_info_vram_total", vram_total_bytes),
            ("mem_info_vram_used", vram_used_bytes),
            ("gpu_busy_percent", busy_percent),
        ):
            self.write_value(f"{base}/{file}", value)
