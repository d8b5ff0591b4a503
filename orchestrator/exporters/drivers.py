"""The one table of driver-specific counter names: RDMA `hw_counters/` and `ethtool -S` keys per
NIC driver (mlx5, bnxt_re, ionic), each mapped to a normalised metric, its fixed labels, the
factor to base units and the hardware counter width.

Facts from `shared/reference/fabric-counters.md` §1.2-1.7. A new driver or a renamed counter is a
row here; the collectors hold no driver names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from orchestrator.exporters import names as n

MICROSECONDS_PER_SECOND = 1_000_000
PRIORITIES = range(8)
DIRECTIONS = ("rx", "tx")


@dataclass(frozen=True, slots=True)
class CounterSource:
    """Where one raw counter goes: `metric` with `labels` added, in base units as
    raw × `multiplier` / `divisor` (IB data counters count 4-octet words; pause times are µs).

    `width_bits` is the hardware counter's width; a 32-bit counter wraps at 2^32 and readers of
    deltas pass it to `rates.counter_delta`.
    """

    metric: str
    labels: tuple[tuple[str, str], ...] = ()
    multiplier: int = 1
    divisor: int = 1
    width_bits: int = 64

    def base_units(self, raw: int) -> float:
        """The raw counter in the metric's base unit (exact for whole results)."""
        if self.multiplier == 1 and self.divisor == 1:
            return raw
        return raw * self.multiplier / self.divisor


@dataclass(frozen=True, slots=True)
class DriverCounters:
    """A NIC driver's counter names. `kernel_drivers` are the names `device/driver` links to;
    `device_prefixes` recognise the RDMA device by name when that link is absent."""

    name: str
    kernel_drivers: tuple[str, ...]
    device_prefixes: tuple[str, ...]
    hw_counters: Mapping[str, CounterSource]
    ethtool: Mapping[str, CounterSource] = field(default_factory=dict)


PORT_COUNTERS: Final = MappingProxyType(
    {
        "port_xmit_data": CounterSource(n.RDMA_PORT_TRANSMIT_BYTES, multiplier=4),  # octets / 4
        "port_rcv_data": CounterSource(n.RDMA_PORT_RECEIVE_BYTES, multiplier=4),
        "port_xmit_packets": CounterSource(n.RDMA_PORT_TRANSMIT_PACKETS),
        "port_rcv_packets": CounterSource(n.RDMA_PORT_RECEIVE_PACKETS),
        "link_downed": CounterSource(n.RDMA_PORT_LINK_DOWNED),
        "link_error_recovery": CounterSource(n.RDMA_PORT_LINK_ERROR_RECOVERY),
        "symbol_error": CounterSource(n.RDMA_PORT_SYMBOL_ERRORS),
        "port_rcv_errors": CounterSource(n.RDMA_PORT_RECEIVE_ERRORS),
        "port_xmit_discards": CounterSource(n.RDMA_PORT_TRANSMIT_DISCARDS),
        "port_xmit_wait": CounterSource(n.RDMA_PORT_TRANSMIT_WAIT),
    }
)
"""IB PerfMgmt `ports/<p>/counters/`, the same file names for every driver that has them."""


def _pfc(key: str, metric: str, divisor: int = 1) -> dict[str, CounterSource]:
    """Per-priority, per-direction ethtool keys; `key` has `{d}` (rx/tx) and `{p}` (0-7)."""
    return {
        key.format(d=d, p=p): CounterSource(
            metric, (("priority", str(p)), ("direction", d)), divisor=divisor
        )
        for d in DIRECTIONS
        for p in PRIORITIES
    }


def _retries(kind: str) -> tuple[tuple[str, str], ...]:
    return (("kind", kind),)


_Q32 = 32  # mlx5 Q-counters are read as be32

MLX5: Final = DriverCounters(
    name="mlx5",
    kernel_drivers=("mlx5_core", "mlx5_ib"),
    device_prefixes=("mlx5_",),
    hw_counters=MappingProxyType(
        {
            "np_cnp_sent": CounterSource(n.RDMA_CNP_SENT),
            "rp_cnp_handled": CounterSource(n.RDMA_CNP_RECEIVED),
            "rp_cnp_ignored": CounterSource(n.RDMA_CNP_IGNORED),
            "np_ecn_marked_roce_packets": CounterSource(n.RDMA_ECN_MARKED_RECEIVED),
            "local_ack_timeout_err": CounterSource(n.RDMA_LOCAL_ACK_TIMEOUTS, width_bits=_Q32),
            "packet_seq_err": CounterSource(n.RDMA_SEQ_ERROR_NAKS_RECEIVED, width_bits=_Q32),
            "out_of_sequence": CounterSource(n.RDMA_OUT_OF_SEQUENCE, width_bits=_Q32),
            "rnr_nak_retry_err": CounterSource(n.RDMA_RNR_NAKS_RECEIVED, width_bits=_Q32),
            "req_transport_retries_exceeded": CounterSource(
                n.RDMA_RETRIES_EXCEEDED, _retries("transport"), width_bits=_Q32
            ),
            "req_rnr_retries_exceeded": CounterSource(
                n.RDMA_RETRIES_EXCEEDED, _retries("rnr"), width_bits=_Q32
            ),
            "duplicate_request": CounterSource(n.RDMA_DUPLICATE_REQUESTS, width_bits=_Q32),
            "out_of_buffer": CounterSource(n.RDMA_OUT_OF_BUFFER_DROPS, width_bits=_Q32),
        }
    ),
    ethtool=MappingProxyType(
        {
            **_pfc("{d}_prio{p}_pause", n.NIC_PFC_PAUSE_FRAMES),
            **_pfc("{d}_prio{p}_pause_duration", n.NIC_PFC_PAUSE_DURATION, MICROSECONDS_PER_SECOND),
            "tx_pause_storm_warning_events": CounterSource(
                n.NIC_PAUSE_STORM_EVENTS, (("severity", "warning"),)
            ),
            "tx_pause_storm_error_events": CounterSource(
                n.NIC_PAUSE_STORM_EVENTS, (("severity", "error"),)
            ),
            "link_down_events_phy": CounterSource(n.NIC_LINK_DOWN_EVENTS),
        }
    ),
)

BNXT_RE: Final = DriverCounters(
    name="bnxt_re",
    kernel_drivers=("bnxt_en", "bnxt_re"),
    device_prefixes=("bnxt_re",),
    hw_counters=MappingProxyType(
        {
            "tx_bytes": CounterSource(n.RDMA_PORT_TRANSMIT_BYTES),
            "rx_bytes": CounterSource(n.RDMA_PORT_RECEIVE_BYTES),
            "tx_pkts": CounterSource(n.RDMA_PORT_TRANSMIT_PACKETS),
            "rx_pkts": CounterSource(n.RDMA_PORT_RECEIVE_PACKETS),
            "tx_cnp_pkts": CounterSource(n.RDMA_CNP_SENT),
            "rx_cnp_pkts": CounterSource(n.RDMA_CNP_RECEIVED),
            "rx_ecn_marked_pkts": CounterSource(n.RDMA_ECN_MARKED_RECEIVED),
            "to_retransmits": CounterSource(n.RDMA_LOCAL_ACK_TIMEOUTS),
            "seq_err_naks_rcvd": CounterSource(n.RDMA_SEQ_ERROR_NAKS_RECEIVED),
            "rnr_naks_rcvd": CounterSource(n.RDMA_RNR_NAKS_RECEIVED),
            "max_retry_exceeded": CounterSource(n.RDMA_RETRIES_EXCEEDED, _retries("transport")),
            "dup_req": CounterSource(n.RDMA_DUPLICATE_REQUESTS),
            "oos_drop_count": CounterSource(n.RDMA_OUT_OF_SEQUENCE),
            "rx_out_of_buffer": CounterSource(n.RDMA_OUT_OF_BUFFER_DROPS),
        }
    ),
    ethtool=MappingProxyType(
        {
            **_pfc("{d}_pfc_ena_frames_pri{p}", n.NIC_PFC_PAUSE_FRAMES),
            **_pfc("pfc_pri{p}_{d}_duration_us", n.NIC_PFC_PAUSE_DURATION, MICROSECONDS_PER_SECOND),
            "continuous_roce_pause_events": CounterSource(
                n.NIC_PAUSE_STORM_EVENTS, (("severity", "warning"),)
            ),
            "link_down_events": CounterSource(n.NIC_LINK_DOWN_EVENTS),
        }
    ),
)

IONIC: Final = DriverCounters(
    name="ionic",
    kernel_drivers=("ionic", "ionic_rdma"),
    device_prefixes=("ionic_",),
    hw_counters=MappingProxyType(
        {
            "tx_rdma_ucast_bytes": CounterSource(n.RDMA_PORT_TRANSMIT_BYTES),
            "rx_rdma_ucast_bytes": CounterSource(n.RDMA_PORT_RECEIVE_BYTES),
            "tx_rdma_ucast_pkts": CounterSource(n.RDMA_PORT_TRANSMIT_PACKETS),
            "rx_rdma_ucast_pkts": CounterSource(n.RDMA_PORT_RECEIVE_PACKETS),
            "tx_rdma_cnp_pkts": CounterSource(n.RDMA_CNP_SENT),
            "rx_rdma_cnp_pkts": CounterSource(n.RDMA_CNP_RECEIVED),
            "rx_rdma_ecn_pkts": CounterSource(n.RDMA_ECN_MARKED_RECEIVED),
            "req_rx_pkt_seq_err": CounterSource(n.RDMA_SEQ_ERROR_NAKS_RECEIVED),
            "req_rx_rnr_retry_err": CounterSource(n.RDMA_RNR_NAKS_RECEIVED),
            "req_tx_retry_excd_err": CounterSource(n.RDMA_RETRIES_EXCEEDED, _retries("transport")),
            "resp_rx_dup_request": CounterSource(n.RDMA_DUPLICATE_REQUESTS),
            "resp_rx_outof_buf": CounterSource(n.RDMA_OUT_OF_BUFFER_DROPS),
            "resp_rx_outouf_seq": CounterSource(n.RDMA_OUT_OF_SEQUENCE),  # sic, firmware spelling
        }
    ),
    ethtool=MappingProxyType(
        # Pause time in 1 µs units by name (reference §1.7: semantics unverified). ionic has no
        # per-priority pause frame counts in `ethtool -S`, only totals.
        _pfc("{d}_pripause_{p}_1us_count", n.NIC_PFC_PAUSE_DURATION, MICROSECONDS_PER_SECOND)
    ),
)

UNKNOWN: Final = DriverCounters(
    name="unknown", kernel_drivers=(), device_prefixes=(), hw_counters=MappingProxyType({})
)
"""A device no row recognises: only the driver-neutral `counters/` and port files are read."""

DRIVERS: Final = (MLX5, BNXT_RE, IONIC)


def driver_for(device: str, kernel_driver: str | None) -> DriverCounters:
    """The row for an RDMA device, by the kernel driver it is bound to, else by its name."""
    for row in DRIVERS:
        if kernel_driver in row.kernel_drivers:
            return row
    for row in DRIVERS:
        if device.startswith(row.device_prefixes):
            return row
    return UNKNOWN
