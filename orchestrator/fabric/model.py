"""The counters of one simulated node: mlx5 RoCE NICs and amdgpu cards, moved by traffic and faults.

Pure state plus an injected random source: `advance` moves the counters by what the node's
replicas served over `dt_s` and by the faults active now; `files` renders the whole sysfs view
(`tree.py` writes it). The traffic model is deliberately simple and its constants are stated
here, because what matters downstream is *which* counters move and by how much relative to their
own baseline, not absolute bytes:

- RDMA bytes: `BYTES_PER_GENERATED_TOKEN` and `BYTES_PER_PROMPT_TOKEN` (KV and activation
  transfers), in 4096-byte RoCE packets, spread over the node's NICs, plus a trickle when idle.
- Congestion noise: ECN marks and CNPs at `BASELINE_ECN_PER_PACKET` of packets (jittered), a rare
  ACK timeout, and PFC pauses near `BASELINE_PAUSE_OCCUPANCY` on the RoCE priority.
- HBM: model weights plus the KV pool filled to the replica's KV-cache usage.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from orchestrator.core.generations import Generation, spec_of

ROCE_MTU_BYTES: Final = 4096
ROCE_PRIORITY: Final = 3  # the lossless class RoCE runs on in common PFC set-ups
BYTES_PER_GENERATED_TOKEN: Final = 64 * 1024
BYTES_PER_PROMPT_TOKEN: Final = 16 * 1024
IDLE_BYTES_PER_S: Final = 64 * 1024
BASELINE_ECN_PER_PACKET: Final = 2e-3
BASELINE_ACK_TIMEOUTS_PER_S: Final = 0.02
BASELINE_PAUSE_OCCUPANCY: Final = 0.002
PAUSE_FRAMES_PER_PAUSED_S: Final = 20_000  # a pause quantum refreshed every ~50 µs
MODEL_WEIGHT_BYTES: Final = 65e9  # GPT-OSS-120B in MXFP4, about 65 GB per replica
KV_POOL_FRACTION: Final = 0.9  # the engine's memory utilisation target

# Fault effects, per second unless stated.
FLAP_PERIOD_S: Final = 4.0  # one down-and-up every period
FLAP_DOWN_S: Final = 1.5  # the link shows DOWN this long after each flap (renegotiation)
STORM_RX_PAUSE_OCCUPANCY: Final = 0.95  # the switch pauses us nearly all the time
STORM_TX_PAUSE_OCCUPANCY: Final = 0.3
STORM_WARNING_EVERY_S: Final = 5.0
STORM_THROUGHPUT_FACTOR: Final = 0.15
SURGE_CNP_PER_S: Final = 20_000.0
RETRANSMIT_ACK_TIMEOUTS_PER_S: Final = 40.0
RETRANSMIT_SEQ_NAKS_PER_S: Final = 80.0
RETRANSMIT_OUT_OF_SEQUENCE_PER_S: Final = 120.0
HBM_PRESSURE_USED_RATIO: Final = 0.985
_COUNTER_32_MODULUS: Final = 1 << 32


class FaultKind(StrEnum):
    """What `orchestrator fault inject --kind` can do to a node."""

    LINK_FLAP = "link-flap"
    PFC_STORM = "pfc-storm"
    CNP_SURGE = "cnp-surge"
    RETRANSMITS = "retransmits"
    HBM_PRESSURE = "hbm-pressure"


@dataclass(frozen=True, slots=True)
class NodeTraffic:
    """What the node's replicas did since the last advance; `kv_cache_usage` per GPU in [0, 1]."""

    generated_tokens: float = 0.0
    prompt_tokens: float = 0.0
    running: int = 0
    kv_cache_usage: tuple[float, ...] = ()


@dataclass(slots=True)
class _Nic:
    device: str
    netdev: str
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    ethtool: dict[str, int] = field(default_factory=dict)
    carrier_changes: int = 2  # an interface that came up once at boot has changed carrier twice
    fractions: dict[str, float] = field(default_factory=dict)  # sub-unit remainders

    def add(self, table: dict[str, int], name: str, amount: float, wrap_32: bool = False) -> None:
        """Grow a counter by a real amount, carrying the fraction to the next call."""
        whole_and_fraction = amount + self.fractions.get(name, 0.0)
        whole = int(whole_and_fraction)
        self.fractions[name] = whole_and_fraction - whole
        value = table.get(name, 0) + whole
        table[name] = value % _COUNTER_32_MODULUS if wrap_32 else value


Q32_COUNTERS: Final = frozenset(
    {"local_ack_timeout_err", "packet_seq_err", "out_of_sequence", "req_transport_retries_exceeded"}
)


class NodeFabricModel:
    """One node's NIC and GPU counters. `nics` RoCE ports (mlx5_0...), `gpus` amdgpu cards."""

    def __init__(
        self, generation: Generation, *, nics: int = 1, gpus: int = 1, rng: random.Random
    ) -> None:
        self.generation = generation
        self._rng = rng
        self._spec = spec_of(generation)
        self._nics = [_Nic(f"mlx5_{i}", f"enp{68 + i}s0np0") for i in range(nics)]
        self._gpus = gpus
        self._elapsed_s = 0.0
        self._link_down = False
        self._kv_usage: tuple[float, ...] = (0.0,) * gpus
        self._running = 0
        self._faults: frozenset[FaultKind] = frozenset()
        self._next_flap_s = 0.0
        for nic in self._nics:
            for name in (
                "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                "link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
                "port_xmit_discards", "port_xmit_wait",
            ):  # fmt: skip
                nic.counters[name] = 0
            for name in (
                "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets",
                *sorted(Q32_COUNTERS), "rnr_nak_retry_err", "req_rnr_retries_exceeded",
                "duplicate_request", "out_of_buffer",
            ):  # fmt: skip
                nic.hw_counters[name] = 0
            for direction in ("rx", "tx"):
                for key in ("pause", "pause_duration", "pause_transition"):
                    nic.ethtool[f"{direction}_prio{ROCE_PRIORITY}_{key}"] = 0
            for key in (
                "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
                "link_down_events_phy",
            ):  # fmt: skip
                nic.ethtool[key] = 0

    @property
    def netdevs(self) -> tuple[str, ...]:
        return tuple(nic.netdev for nic in self._nics)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(nic.device for nic in self._nics)

    @property
    def link_down(self) -> bool:
        return self._link_down

    def advance(self, dt_s: float, traffic: NodeTraffic, faults: frozenset[FaultKind]) -> None:
        """Move every counter by `dt_s` seconds of `traffic` under `faults`."""
        if dt_s <= 0:
            return
        if FaultKind.LINK_FLAP in faults and FaultKind.LINK_FLAP not in self._faults:
            self._next_flap_s = self._elapsed_s
        self._faults = faults
        self._elapsed_s += dt_s
        self._running = traffic.running
        if traffic.kv_cache_usage:
            usage = list(traffic.kv_cache_usage[: self._gpus])
            usage += [usage[-1]] * (self._gpus - len(usage))
            self._kv_usage = tuple(usage)
        flaps = 0
        while self._flapping and self._next_flap_s <= self._elapsed_s:
            flaps += 1
            self._next_flap_s += FLAP_PERIOD_S
        last_flap_s = self._next_flap_s - FLAP_PERIOD_S
        self._link_down = self._flapping and self._elapsed_s - last_flap_s < FLAP_DOWN_S
        throughput = 0.0 if self._link_down else 1.0
        if FaultKind.PFC_STORM in faults:
            throughput *= STORM_THROUGHPUT_FACTOR
        total_bytes = (
            traffic.generated_tokens * BYTES_PER_GENERATED_TOKEN
            + traffic.prompt_tokens * BYTES_PER_PROMPT_TOKEN
            + IDLE_BYTES_PER_S * dt_s
        ) * throughput
        for nic in self._nics:
            self._advance_nic(nic, dt_s, total_bytes / len(self._nics), flaps)

    @property
    def _flapping(self) -> bool:
        return FaultKind.LINK_FLAP in self._faults

    def _advance_nic(self, nic: _Nic, dt_s: float, nic_bytes: float, flaps: int) -> None:
        rng = self._rng
        packets = nic_bytes / ROCE_MTU_BYTES
        nic.add(nic.counters, "port_xmit_data", nic_bytes / 4)
        nic.add(nic.counters, "port_rcv_data", nic_bytes / 4)
        nic.add(nic.counters, "port_xmit_packets", packets)
        nic.add(nic.counters, "port_rcv_packets", packets)
        ecn = packets * BASELINE_ECN_PER_PACKET * rng.uniform(0.5, 1.5)
        if FaultKind.CNP_SURGE in self._faults:
            ecn += SURGE_CNP_PER_S * dt_s * rng.uniform(0.9, 1.1)
        nic.add(nic.hw_counters, "np_ecn_marked_roce_packets", ecn)
        nic.add(nic.hw_counters, "np_cnp_sent", ecn * 0.95)
        nic.add(nic.hw_counters, "rp_cnp_handled", ecn * rng.uniform(0.9, 1.0))
        ack_timeouts = BASELINE_ACK_TIMEOUTS_PER_S * dt_s * rng.uniform(0.0, 2.0)
        if FaultKind.RETRANSMITS in self._faults:
            ack_timeouts += RETRANSMIT_ACK_TIMEOUTS_PER_S * dt_s
            for name, per_s in (
                ("packet_seq_err", RETRANSMIT_SEQ_NAKS_PER_S),
                ("out_of_sequence", RETRANSMIT_OUT_OF_SEQUENCE_PER_S),
            ):
                nic.add(nic.hw_counters, name, per_s * dt_s, wrap_32=True)
        nic.add(nic.hw_counters, "local_ack_timeout_err", ack_timeouts, True)
        rx_pause = BASELINE_PAUSE_OCCUPANCY * rng.uniform(0.0, 2.0)
        tx_pause = BASELINE_PAUSE_OCCUPANCY * rng.uniform(0.0, 1.0)
        if FaultKind.PFC_STORM in self._faults:
            rx_pause, tx_pause = STORM_RX_PAUSE_OCCUPANCY, STORM_TX_PAUSE_OCCUPANCY
            nic.add(nic.counters, "port_xmit_wait", dt_s * 1e6 * rx_pause)
            nic.add(nic.ethtool, "tx_pause_storm_warning_events", dt_s / STORM_WARNING_EVERY_S)
        for direction, occupancy in (("rx", rx_pause), ("tx", tx_pause)):
            prefix = f"{direction}_prio{ROCE_PRIORITY}"
            nic.add(nic.ethtool, f"{prefix}_pause_duration", occupancy * dt_s * 1e6)
            nic.add(nic.ethtool, f"{prefix}_pause", occupancy * dt_s * PAUSE_FRAMES_PER_PAUSED_S)
            nic.add(nic.ethtool, f"{prefix}_pause_transition", occupancy * dt_s * 10)
        if flaps:
            nic.carrier_changes += 2 * flaps
            nic.add(nic.counters, "link_downed", flaps)
            nic.add(nic.ethtool, "link_down_events_phy", flaps)

    def files(self) -> dict[str, str]:
        """Every file of the node's view, by path: sysfs paths relative to the root, and
        `ethtool/<netdev>.txt` for the `ethtool -S` text."""
        out: dict[str, str] = {}
        state, phys, oper = (
            ("1: DOWN", "3: Disabled", "down") if self._link_down else
            ("4: ACTIVE", "5: LinkUp", "up")
        )  # fmt: skip
        for nic in self._nics:
            port = f"class/infiniband/{nic.device}/ports/1"
            out[f"{port}/state"] = state
            out[f"{port}/phys_state"] = phys
            for name, value in nic.counters.items():
                out[f"{port}/counters/{name}"] = str(value)
            for name, value in nic.hw_counters.items():
                out[f"{port}/hw_counters/{name}"] = str(value)
            out[f"class/net/{nic.netdev}/operstate"] = oper
            out[f"class/net/{nic.netdev}/carrier_changes"] = str(nic.carrier_changes)
            lines = ["NIC statistics:", *(f"     {k}: {v}" for k, v in nic.ethtool.items())]
            out[f"ethtool/{nic.netdev}.txt"] = "\n".join(lines)
        for card, usage in enumerate(self._kv_usage):
            base = f"class/drm/card{card}/device"
            total = self._spec.hbm_bytes
            used = MODEL_WEIGHT_BYTES + usage * (KV_POOL_FRACTION * total - MODEL_WEIGHT_BYTES)
            if FaultKind.HBM_PRESSURE in self._faults:
                used = HBM_PRESSURE_USED_RATIO * total
            busy = min(100, 15 * self._running) if self._running else self._rng.randint(0, 2)
            out[f"{base}/mem_info_vram_total"] = str(int(total))
            out[f"{base}/mem_info_vram_used"] = str(int(used))
            out[f"{base}/gpu_busy_percent"] = str(busy)
        return out

    def static_files(self) -> Mapping[str, str]:
        """Files that never change: port metadata, link speed, GPU identity."""
        out: dict[str, str] = {}
        for nic in self._nics:
            base = f"class/infiniband/{nic.device}"
            out[f"{base}/fw_ver"] = "28.42.1000"
            out[f"{base}/ports/1/rate"] = "400 Gb/sec (4X NDR)"
            out[f"{base}/ports/1/link_layer"] = "Ethernet"
            out[f"{base}/ports/1/gid_attrs/ndevs/0"] = nic.netdev
            out[f"class/net/{nic.netdev}/speed"] = "400000"
        for card in range(self._gpus):
            base = f"class/drm/card{card}/device"
            out[f"{base}/product_name"] = f"AMD Instinct {self.generation.value} OAM"
            out[f"{base}/device"] = f"0x{self._spec.device_id.lower()}"
        return out
