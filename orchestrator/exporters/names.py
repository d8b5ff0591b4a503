"""Every metric the node exporter serves, defined once: name, type, labels and help.

Names follow the proposed set in `shared/reference/fabric-counters.md` §6 (Prometheus naming: base
units, `_total` on counters, `_info` for metadata, `_ratio` for 0-1). Every series also carries
`node` and `site` (from the exporter's flags); `COMMON_LABELS` lists them. Rules, dashboards and
`docs/metrics.md` read these names from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class MetricType(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family. `labels` excludes the common ones (`node`, `site`), which come first.

    `name` is the exposed name; a counter's name ends in `_total`.
    """

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str
    source: str

    @property
    def label_names(self) -> tuple[str, ...]:
        """All label names in exposition order: the common ones, then this family's."""
        return (*COMMON_LABELS, *self.labels)


COMMON_LABELS: Final = ("node", "site")

RDMA = ("device", "port", "driver")
PFC = ("netdev", "priority", "direction")
GPU = ("gpu", "gpu_generation")

C, G = MetricType.COUNTER, MetricType.GAUGE

RDMA_PORT_INFO = "rdma_port_info"
RDMA_PORT_STATE = "rdma_port_state"
RDMA_PORT_PHYSICAL_STATE = "rdma_port_physical_state"
RDMA_PORT_RATE = "rdma_port_rate_bytes_per_second"
RDMA_PORT_LINK_DOWNED = "rdma_port_link_downed_total"
RDMA_PORT_LINK_ERROR_RECOVERY = "rdma_port_link_error_recovery_total"
RDMA_PORT_SYMBOL_ERRORS = "rdma_port_symbol_errors_total"
RDMA_PORT_RECEIVE_ERRORS = "rdma_port_receive_errors_total"
RDMA_PORT_TRANSMIT_DISCARDS = "rdma_port_transmit_discards_total"
RDMA_PORT_TRANSMIT_WAIT = "rdma_port_transmit_wait_ticks_total"
RDMA_PORT_TRANSMIT_BYTES = "rdma_port_transmit_bytes_total"
RDMA_PORT_RECEIVE_BYTES = "rdma_port_receive_bytes_total"
RDMA_PORT_TRANSMIT_PACKETS = "rdma_port_transmit_packets_total"
RDMA_PORT_RECEIVE_PACKETS = "rdma_port_receive_packets_total"
RDMA_CNP_SENT = "rdma_cnp_sent_packets_total"
RDMA_CNP_RECEIVED = "rdma_cnp_received_packets_total"
RDMA_CNP_IGNORED = "rdma_cnp_ignored_packets_total"
RDMA_ECN_MARKED_RECEIVED = "rdma_ecn_marked_received_packets_total"
RDMA_LOCAL_ACK_TIMEOUTS = "rdma_local_ack_timeouts_total"
RDMA_SEQ_ERROR_NAKS_RECEIVED = "rdma_seq_error_naks_received_total"
RDMA_OUT_OF_SEQUENCE = "rdma_out_of_sequence_packets_total"
RDMA_RNR_NAKS_RECEIVED = "rdma_rnr_naks_received_total"
RDMA_RETRIES_EXCEEDED = "rdma_retries_exceeded_total"
RDMA_DUPLICATE_REQUESTS = "rdma_duplicate_requests_total"
RDMA_OUT_OF_BUFFER_DROPS = "rdma_out_of_buffer_drops_total"
NIC_PFC_PAUSE_FRAMES = "nic_pfc_pause_frames_total"
NIC_PFC_PAUSE_DURATION = "nic_pfc_pause_duration_seconds_total"
NIC_PAUSE_STORM_EVENTS = "nic_pause_storm_events_total"
NIC_LINK_DOWN_EVENTS = "nic_link_down_events_total"
NIC_LINK_UP = "nic_link_up"
NIC_CARRIER_CHANGES = "nic_carrier_changes_total"
NIC_SPEED = "nic_speed_bytes_per_second"
GPU_HBM_TOTAL = "gpu_hbm_total_bytes"
GPU_HBM_USED = "gpu_hbm_used_bytes"
GPU_BUSY = "gpu_busy_ratio"
GPU_INFO = "gpu_info"
NODE_SOFTWARE_INFO = "node_software_info"
GPU_FIRMWARE_INFO = "gpu_firmware_info"
EXPORTER_ERRORS = "orchestrator_exporter_errors_total"
EXPORTER_SCRAPE_DURATION = "orchestrator_exporter_scrape_duration_seconds"

_IB = "class/infiniband/<dev>/ports/<port>/"
_HW = _IB + "hw_counters/ (driver table)"
_ETHTOOL = "ethtool -S <netdev> (driver table)"
_DRM = "class/drm/card<N>/device/"

METRICS: Final = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            MetricSpec(
                RDMA_PORT_INFO, G,
                (*RDMA, "netdev", "link_layer", "fw_version", "state", "phys_state"),
                "RDMA port metadata; always 1.", _IB + "{state,phys_state,link_layer}",
            ),
            MetricSpec(
                RDMA_PORT_STATE, G, RDMA,
                "Logical port state id: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
                _IB + "state",
            ),
            MetricSpec(
                RDMA_PORT_PHYSICAL_STATE, G, RDMA,
                "Physical port state id: 2 Polling, 3 Disabled, 5 LinkUp, 6 LinkErrorRecovery.",
                _IB + "phys_state",
            ),
            MetricSpec(
                RDMA_PORT_RATE, G, RDMA, "Active link rate (width x lane speed) in bytes/s.",
                _IB + "rate",
            ),
            MetricSpec(
                RDMA_PORT_LINK_DOWNED, C, RDMA,
                "Times link error recovery failed and the link went down.",
                _IB + "counters/link_downed",
            ),
            MetricSpec(
                RDMA_PORT_LINK_ERROR_RECOVERY, C, RDMA,
                "Successful link retrains after errors.", _IB + "counters/link_error_recovery",
            ),
            MetricSpec(
                RDMA_PORT_SYMBOL_ERRORS, C, RDMA, "Minor errors on the physical lanes.",
                _IB + "counters/symbol_error",
            ),
            MetricSpec(
                RDMA_PORT_RECEIVE_ERRORS, C, RDMA, "Packets received with errors.",
                _IB + "counters/port_rcv_errors",
            ),
            MetricSpec(
                RDMA_PORT_TRANSMIT_DISCARDS, C, RDMA,
                "Outbound packets discarded (port down or congested).",
                _IB + "counters/port_xmit_discards",
            ),
            MetricSpec(
                RDMA_PORT_TRANSMIT_WAIT, C, RDMA,
                "Ticks with data to send but no credits to send it.",
                _IB + "counters/port_xmit_wait",
            ),
            MetricSpec(
                RDMA_PORT_TRANSMIT_BYTES, C, RDMA, "RDMA bytes sent.",
                _IB + "counters/port_xmit_data (x4) or " + _HW,
            ),
            MetricSpec(
                RDMA_PORT_RECEIVE_BYTES, C, RDMA, "RDMA bytes received.",
                _IB + "counters/port_rcv_data (x4) or " + _HW,
            ),
            MetricSpec(
                RDMA_PORT_TRANSMIT_PACKETS, C, RDMA, "RDMA packets sent.",
                _IB + "counters/port_xmit_packets or " + _HW,
            ),
            MetricSpec(
                RDMA_PORT_RECEIVE_PACKETS, C, RDMA, "RDMA packets received.",
                _IB + "counters/port_rcv_packets or " + _HW,
            ),
            MetricSpec(
                RDMA_CNP_SENT, C, RDMA,
                "Congestion notification packets sent for ECN-marked packets received.", _HW,
            ),
            MetricSpec(
                RDMA_CNP_RECEIVED, C, RDMA,
                "Congestion notification packets received and acted on (send rate cut).", _HW,
            ),
            MetricSpec(
                RDMA_CNP_IGNORED, C, RDMA,
                "Congestion notification packets ignored; rising means congestion control is "
                "misconfigured.",
                _HW,
            ),
            MetricSpec(
                RDMA_ECN_MARKED_RECEIVED, C, RDMA, "ECN congestion-marked RoCE packets received.",
                _HW,
            ),
            MetricSpec(
                RDMA_LOCAL_ACK_TIMEOUTS, C, RDMA,
                "ACK timer expiries on sending queue pairs (retried, not yet fatal).", _HW,
            ),
            MetricSpec(
                RDMA_SEQ_ERROR_NAKS_RECEIVED, C, RDMA,
                "NAK-sequence-error packets received (retried, not yet fatal).", _HW,
            ),
            MetricSpec(
                RDMA_OUT_OF_SEQUENCE, C, RDMA, "Out-of-sequence packets received.", _HW,
            ),
            MetricSpec(
                RDMA_RNR_NAKS_RECEIVED, C, RDMA,
                "Receiver-not-ready NAKs received (retried, not yet fatal).", _HW,
            ),
            MetricSpec(
                RDMA_RETRIES_EXCEEDED, C, (*RDMA, "kind"),
                "Retry budgets exhausted (the queue pair goes to error); kind: transport or rnr.",
                _HW,
            ),
            MetricSpec(
                RDMA_DUPLICATE_REQUESTS, C, RDMA, "Duplicate (already executed) requests received.",
                _HW,
            ),
            MetricSpec(
                RDMA_OUT_OF_BUFFER_DROPS, C, RDMA,
                "Packets dropped for lack of a posted receive buffer.", _HW,
            ),
            MetricSpec(
                NIC_PFC_PAUSE_FRAMES, C, PFC,
                "PFC pause frames; direction rx = the network paused us, tx = we paused the peer.",
                _ETHTOOL,
            ),
            MetricSpec(
                NIC_PFC_PAUSE_DURATION, C, PFC,
                "Seconds paused by PFC; its rate is the fraction of time paused.", _ETHTOOL,
            ),
            MetricSpec(
                NIC_PAUSE_STORM_EVENTS, C, ("netdev", "severity"),
                "Pause storms: warning = pausing for long, error = pause transmit disabled.",
                _ETHTOOL,
            ),
            MetricSpec(
                NIC_LINK_DOWN_EVENTS, C, ("netdev",), "Times the port's link went down.", _ETHTOOL,
            ),
            MetricSpec(
                NIC_LINK_UP, G, ("device",), "1 when the interface's operstate is up, else 0.",
                "class/net/<device>/operstate",
            ),
            MetricSpec(
                NIC_CARRIER_CHANGES, C, ("device",), "Link carrier changes (flaps count twice).",
                "class/net/<device>/carrier_changes",
            ),
            MetricSpec(
                NIC_SPEED, G, ("device",), "Link speed in bytes/s; absent while unknown.",
                "class/net/<device>/speed (Mbit/s)",
            ),
            MetricSpec(
                GPU_HBM_TOTAL, G, GPU, "HBM (VRAM) size in bytes.", _DRM + "mem_info_vram_total",
            ),
            MetricSpec(
                GPU_HBM_USED, G, GPU, "HBM (VRAM) in use, in bytes.", _DRM + "mem_info_vram_used",
            ),
            MetricSpec(
                GPU_BUSY, G, GPU, "Share of time the GPU's cores were busy, 0-1.",
                _DRM + "gpu_busy_percent (/100)",
            ),
            MetricSpec(
                GPU_INFO, G, ("gpu", "product_name", "device_id", "gpu_generation"),
                "GPU metadata; always 1. gpu_generation is from product_name or the PCI id.",
                _DRM + "{product_name,device}",
            ),
            MetricSpec(
                NODE_SOFTWARE_INFO, G, ("rocm_version", "amdgpu_driver_version"),
                "The node's GPU software; always 1. An empty label is a version not found.",
                "ROCm's .info/version file; module/amdgpu/version",
            ),
            MetricSpec(
                GPU_FIRMWARE_INFO, G, (*GPU, "component", "version"),
                "GPU firmware versions; always 1. component is vbios or a fw_version/ file's "
                "name without _fw_version (smc, mec, sos, ...).",
                _DRM + "{vbios_version,fw_version/*_fw_version}",
            ),
            MetricSpec(
                EXPORTER_ERRORS, C, ("collector",),
                "Files that could not be parsed (each is logged once), by collector.",
                "exporter",
            ),
            MetricSpec(
                EXPORTER_SCRAPE_DURATION, G, ("collector",),
                "Seconds the last scrape spent in each collector.", "exporter",
            ),
        )
    }
)  # fmt: skip
"""All exporter metric families by exposed name."""
