"""RoCE NIC collector: RDMA port state and counters, host link state, and PFC/pause counters.

Reads `class/infiniband/<dev>/ports/<port>/{state,phys_state,rate,link_layer,counters/*,
hw_counters/*}`, `class/net/<if>/{operstate,carrier_changes,speed}` and `ethtool -S` of the
netdevs behind the RDMA ports. Driver-specific names come from `drivers.py`; this module holds
none. Each file is read on its own: a missing one yields no series, a malformed one is reported
in the `Reading` and skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from orchestrator.exporters import names as n
from orchestrator.exporters.drivers import PORT_COUNTERS, CounterSource, DriverCounters, driver_for
from orchestrator.exporters.ethtool import EthtoolReader
from orchestrator.exporters.samples import Reading
from orchestrator.exporters.sysfs import MalformedFile, SysfsRoot

IB = "class/infiniband"
NET = "class/net"
_STATE = re.compile(r"\s*(\d+)\s*:\s*(\S+)\s*")
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec\b.*")
GBIT_BYTES = 1e9 / 8
MBIT_BYTES = 1e6 / 8

T = TypeVar("T")


def parse_state(text: str, where: str) -> tuple[int, str]:
    """`4: ACTIVE` → (4, "ACTIVE"); the same format serves `state` and `phys_state`."""
    match = _STATE.fullmatch(text)
    if match is None:
        raise MalformedFile(where, f"expected '<id>: <NAME>', found {text[:40]!r}")
    return int(match.group(1)), match.group(2)


def parse_rate_bytes_per_s(text: str, where: str) -> float:
    """`100 Gb/sec (4X EDR)` → 12.5e9 bytes/s (the kernel prints active width × lane speed)."""
    match = _RATE.fullmatch(text)
    if match is None:
        raise MalformedFile(where, f"expected '<N> Gb/sec (...)', found {text[:40]!r}")
    return float(match.group(1)) * GBIT_BYTES


class RoceCollector:
    """Reads RDMA ports, host links and PFC counters of one node at each call of `read()`."""

    name = "roce"

    def __init__(self, sysfs: SysfsRoot, ethtool: EthtoolReader) -> None:
        self.sysfs = sysfs
        self.ethtool = ethtool

    def read(self) -> Reading:
        reading = Reading()
        roce_netdevs: dict[str, DriverCounters] = {}
        for device in self.sysfs.list_dir(IB):
            driver = driver_for(device, self.sysfs.link_name(f"{IB}/{device}/device/driver"))
            fw_version = _guarded(reading, self.sysfs.read_text, f"{IB}/{device}/fw_ver")
            for port in self.sysfs.list_dir(f"{IB}/{device}/ports"):
                netdev = self._read_port(reading, device, port, driver, fw_version or "")
                if netdev:
                    roce_netdevs.setdefault(netdev, driver)
        for netdev, driver in sorted(roce_netdevs.items()):
            self._read_ethtool(reading, netdev, driver)
        for interface in self.sysfs.list_dir(NET):
            self._read_link(reading, interface)
        return reading

    def _read_port(
        self, reading: Reading, device: str, port: str, driver: DriverCounters, fw_version: str
    ) -> str:
        """Emit one port's series; return the netdev it is bound to ("" when unknown)."""
        base = f"{IB}/{device}/ports/{port}"
        labels = (device, port, driver.name)
        state = _guarded(reading, self._state, f"{base}/state")
        phys = _guarded(reading, self._state, f"{base}/phys_state")
        if state is not None:
            reading.add(n.RDMA_PORT_STATE, labels, state[0])
        if phys is not None:
            reading.add(n.RDMA_PORT_PHYSICAL_STATE, labels, phys[0])
        rate = _guarded(reading, self._rate, f"{base}/rate")
        if rate is not None:
            reading.add(n.RDMA_PORT_RATE, labels, rate)
        netdev = self._netdev(reading, device, base)
        link_layer = _guarded(reading, self.sysfs.read_text, f"{base}/link_layer") or ""
        info = (
            netdev, link_layer.strip(), fw_version.strip(),
            state[1] if state else "", phys[1] if phys else "",
        )  # fmt: skip
        reading.add(n.RDMA_PORT_INFO, (*labels, *info), 1)
        values: dict[tuple[str, tuple[str, ...]], tuple[float, int]] = {}
        self._read_counters(reading, f"{base}/counters", PORT_COUNTERS, values)
        self._read_counters(reading, f"{base}/hw_counters", driver.hw_counters, values)
        for (metric, extra), (value, width) in values.items():
            reading.add(metric, (*labels, *extra), value, width)
        return netdev

    def _read_counters(
        self,
        reading: Reading,
        directory: str,
        table: Mapping[str, CounterSource],
        values: dict[tuple[str, tuple[str, ...]], tuple[float, int]],
    ) -> None:
        """Counters of one directory into `values`; a later directory wins for the same series
        (a driver's RDMA-only `hw_counters` over the port-wide `counters`)."""
        for name in self.sysfs.list_dir(directory):
            source = table.get(name)
            if source is None:
                continue
            raw = _guarded(reading, self.sysfs.read_int, f"{directory}/{name}")
            if raw is not None:
                key = (source.metric, tuple(value for _, value in source.labels))
                values[key] = (source.base_units(raw), source.width_bits)

    def _netdev(self, reading: Reading, device: str, base: str) -> str:
        """The Ethernet interface behind a RoCE port: GID 0's netdev, else the PCI function's."""
        bound = _guarded(reading, self.sysfs.read_text, f"{base}/gid_attrs/ndevs/0")
        if bound and bound.strip():
            return bound.strip()
        functions = self.sysfs.list_dir(f"{IB}/{device}/device/net")
        return functions[0] if functions else ""

    def _read_ethtool(self, reading: Reading, netdev: str, driver: DriverCounters) -> None:
        if not driver.ethtool:
            return
        stats = _guarded(reading, self.ethtool.stats, netdev)
        if not stats:
            return
        for key, raw in stats.items():
            source = driver.ethtool.get(key)
            if source is not None:
                labels = (netdev, *(value for _, value in source.labels))
                reading.add(source.metric, labels, source.base_units(raw), source.width_bits)

    def _read_link(self, reading: Reading, interface: str) -> None:
        base = f"{NET}/{interface}"
        operstate = _guarded(reading, self.sysfs.read_text, f"{base}/operstate")
        if operstate is not None:
            reading.add(n.NIC_LINK_UP, (interface,), 1 if operstate.strip() == "up" else 0)
        changes = _guarded(reading, self.sysfs.read_int, f"{base}/carrier_changes")
        if changes is not None:
            reading.add(n.NIC_CARRIER_CHANGES, (interface,), changes)
        speed = _guarded(reading, self.sysfs.read_int, f"{base}/speed")
        if speed is not None and speed >= 0:  # -1: speed unknown (link down, virtual device)
            reading.add(n.NIC_SPEED, (interface,), speed * MBIT_BYTES)

    def _state(self, rel: str) -> tuple[int, str] | None:
        text = self.sysfs.read_text(rel)
        return None if text is None else parse_state(text, rel)

    def _rate(self, rel: str) -> float | None:
        text = self.sysfs.read_text(rel)
        return None if text is None else parse_rate_bytes_per_s(text, rel)


def _guarded(reading: Reading, read: Callable[[str], T | None], rel: str) -> T | None:
    """`read(rel)`, or None with the file recorded as malformed in `reading`."""
    try:
        return read(rel)
    except MalformedFile as error:
        reading.malformed.append(error)
        return None
