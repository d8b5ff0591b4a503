"""RoceCollector over the mlx5, bnxt_re and ionic fixture nodes: names, units and bad files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from exporter_fixtures import BY_DRIVER, exporter_for

from orchestrator.exporters import drivers
from orchestrator.exporters import names as n
from orchestrator.exporters.ethtool import CommandEthtoolReader, FileEthtoolReader
from orchestrator.exporters.exposition import NodeExporter
from orchestrator.exporters.rates import counter_delta
from orchestrator.exporters.roce import RoceCollector
from orchestrator.exporters.samples import Sample
from orchestrator.exporters.server import build_exporter
from orchestrator.exporters.sysfs import SysfsRoot
from orchestrator.exporters.tree import NodeTreeBuilder


def value(samples: list[Sample], metric: str, **labels: str) -> float:
    """The one sample of `metric` whose labels include `labels`."""
    found = [
        s.value for s in samples if s.metric == metric and labels.items() <= s.label_map().items()
    ]
    assert len(found) == 1, f"{metric}{labels}: {len(found)} samples"
    return found[0]


def metrics_of(samples: list[Sample]) -> set[str]:
    return {s.metric for s in samples}


def scrape(exporter: NodeExporter) -> list[Sample]:
    return exporter.scrape().samples


def test_mlx5_data_counters_are_words_of_four_bytes() -> None:
    samples = scrape(exporter_for(BY_DRIVER["mlx5"]))
    assert value(samples, n.RDMA_PORT_TRANSMIT_BYTES, device="mlx5_0") == 4 * 2_500_000_000
    assert value(samples, n.RDMA_PORT_RECEIVE_BYTES, device="mlx5_1") == 4 * 3_750_000_000
    assert value(samples, n.RDMA_PORT_TRANSMIT_PACKETS, device="mlx5_0") == 41_000_000


def test_mlx5_hw_counters_map_to_vendor_neutral_names() -> None:
    samples = scrape(exporter_for(BY_DRIVER["mlx5"]))
    port = {"device": "mlx5_1", "port": "1", "driver": "mlx5"}
    assert value(samples, n.RDMA_CNP_SENT, **port) == 3600  # np_cnp_sent
    assert value(samples, n.RDMA_CNP_RECEIVED, **port) == 2700  # rp_cnp_handled
    assert value(samples, n.RDMA_CNP_IGNORED, **port) == 1
    assert value(samples, n.RDMA_ECN_MARKED_RECEIVED, **port) == 4500
    assert value(samples, n.RDMA_LOCAL_ACK_TIMEOUTS, **port) == 5
    assert value(samples, n.RDMA_RETRIES_EXCEEDED, kind="transport", **port) == 1
    assert value(samples, n.RDMA_RETRIES_EXCEEDED, kind="rnr", **port) == 0
    assert value(samples, n.RDMA_OUT_OF_BUFFER_DROPS, **port) == 11


def test_port_state_rate_and_info() -> None:
    samples = scrape(exporter_for(BY_DRIVER["bnxt_re"]))
    assert value(samples, n.RDMA_PORT_STATE, device="bnxt_re0") == 4
    assert value(samples, n.RDMA_PORT_STATE, device="bnxt_re1") == 1
    assert value(samples, n.RDMA_PORT_PHYSICAL_STATE, device="bnxt_re1") == 3
    assert value(samples, n.RDMA_PORT_RATE, device="bnxt_re0") == 400e9 / 8
    assert value(
        samples, n.RDMA_PORT_INFO, device="bnxt_re1", netdev="ens2f0np0", state="DOWN",
        phys_state="Disabled", link_layer="Ethernet", fw_version="230.2.49.0",
    ) == 1  # fmt: skip


def test_pfc_pause_frames_and_durations_in_seconds_for_each_driver() -> None:
    mlx5 = scrape(exporter_for(BY_DRIVER["mlx5"]))
    pfc = {"netdev": "enp42s0np0", "priority": "3"}
    assert value(mlx5, n.NIC_PFC_PAUSE_FRAMES, direction="rx", **pfc) == 12_000
    assert value(mlx5, n.NIC_PFC_PAUSE_DURATION, direction="rx", **pfc) == 3.75  # 3 750 000 µs
    assert value(mlx5, n.NIC_PAUSE_STORM_EVENTS, netdev="enp42s0np0", severity="warning") == 1
    assert value(mlx5, n.NIC_LINK_DOWN_EVENTS, netdev="enp42s0np0") == 2
    bnxt = scrape(exporter_for(BY_DRIVER["bnxt_re"]))
    pfc = {"netdev": "ens1f0np0", "priority": "3"}
    assert value(bnxt, n.NIC_PFC_PAUSE_FRAMES, direction="rx", **pfc) == 900
    assert value(bnxt, n.NIC_PFC_PAUSE_DURATION, direction="tx", **pfc) == 0.03
    ionic = scrape(exporter_for(BY_DRIVER["ionic"]))
    pfc = {"netdev": "enp68s0", "priority": "3"}
    assert value(ionic, n.NIC_PFC_PAUSE_DURATION, direction="rx", **pfc) == 0.8


def test_bnxt_and_ionic_traffic_comes_from_their_hw_counters() -> None:
    bnxt = scrape(exporter_for(BY_DRIVER["bnxt_re"]))
    assert value(bnxt, n.RDMA_PORT_TRANSMIT_BYTES, device="bnxt_re1") == 8_000_000_001
    assert value(bnxt, n.RDMA_LOCAL_ACK_TIMEOUTS, device="bnxt_re0") == 9  # to_retransmits
    ionic = scrape(exporter_for(BY_DRIVER["ionic"]))
    # rocep68s0 says nothing about its driver by name: the device/driver link does.
    assert value(ionic, n.RDMA_PORT_RECEIVE_BYTES, device="rocep68s0", driver="ionic") == 7e9
    assert value(ionic, n.RDMA_OUT_OF_SEQUENCE, device="rocep132s0") == 7  # resp_rx_outouf_seq


def test_host_links_up_carrier_changes_and_speed() -> None:
    samples = scrape(exporter_for(BY_DRIVER["mlx5"]))
    assert value(samples, n.NIC_LINK_UP, device="enp12s0np0") == 1
    assert value(samples, n.NIC_LINK_UP, device="eno1") == 0
    assert value(samples, n.NIC_CARRIER_CHANGES, device="enp42s0np0") == 4
    assert value(samples, n.NIC_SPEED, device="enp12s0np0") == 400_000 * 1e6 / 8
    speeds = {s.labels[0] for s in samples if s.metric == n.NIC_SPEED}
    assert "eno1" not in speeds and "lo" not in speeds  # speed -1: unknown, no series


def test_a_missing_file_gives_no_series_and_no_error(tmp_path: Path) -> None:
    fixture = BY_DRIVER["mlx5"].copy_to(tmp_path)
    port = fixture.directory / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "hw_counters/np_cnp_sent").unlink()
    (port / "rate").unlink()
    scraped = exporter_for(fixture).scrape()
    devices = {s.labels[0] for s in scraped.samples if s.metric == n.RDMA_CNP_SENT}
    assert devices == {"mlx5_1"}
    assert {s.labels[0] for s in scraped.samples if s.metric == n.RDMA_PORT_RATE} == {"mlx5_1"}
    assert scraped.errors_total == {"roce": 0, "hbm": 0, "versions": 0}


def test_a_malformed_file_is_counted_logged_once_and_the_rest_still_exported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fixture = BY_DRIVER["mlx5"].copy_to(tmp_path)
    port = fixture.directory / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters/symbol_error").write_text("error: device busy\n")
    (port / "state").write_text("ACTIVE\n")
    (fixture.directory / "ethtool/enp12s0np0.txt").write_text("NIC statistics:\n  rx_prio3: x\n")
    exporter = exporter_for(fixture)
    clean = scrape(exporter_for(BY_DRIVER["mlx5"]))
    with caplog.at_level(logging.WARNING, logger="orchestrator.exporters"):
        first = exporter.scrape()
        second = exporter.scrape()
    assert first.errors_total["roce"] == 3
    assert second.errors_total["roce"] == 6  # counted at every scrape that meets them
    warned = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(warned) == 3  # ... but logged once per file
    assert any("counters/symbol_error" in r.getMessage() for r in warned)
    # Only what the three files fed is gone (and mlx5_0's info now lacks its state name).
    affected = {
        (n.RDMA_PORT_SYMBOL_ERRORS, "mlx5_0"),
        (n.RDMA_PORT_STATE, "mlx5_0"),
        (n.RDMA_PORT_INFO, "mlx5_0"),
        *((s.metric, "enp12s0np0") for s in clean if s.metric.startswith("nic_p")),
        (n.NIC_LINK_DOWN_EVENTS, "enp12s0np0"),
    }
    unaffected = {s for s in clean if (s.metric, s.labels[0]) not in affected}
    assert unaffected <= set(second.samples)
    assert len(unaffected) > 50
    assert value(second.samples, n.RDMA_PORT_SYMBOL_ERRORS, device="mlx5_1") == 17
    assert value(second.samples, n.RDMA_PORT_INFO, device="mlx5_0", state="") == 1


def test_hw_counters_win_over_port_counters_for_the_same_series(tmp_path: Path) -> None:
    tree = NodeTreeBuilder(tmp_path)
    tree.rdma_port(
        "bnxt_re0", drivers.BNXT_RE, netdev="ens1f0np0",
        counters={"port_xmit_data": 1000}, hw_counters={"tx_bytes": 123},
    )  # fmt: skip
    samples = RoceCollector(SysfsRoot(tmp_path), FileEthtoolReader(tmp_path / "ethtool")).read()
    assert value(samples.samples, n.RDMA_PORT_TRANSMIT_BYTES, device="bnxt_re0") == 123


def test_netdev_falls_back_to_the_pci_function_and_driver_to_the_device_name(
    tmp_path: Path,
) -> None:
    port = tmp_path / "class/infiniband/mlx5_3/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "counters/port_rcv_data").write_text("25\n")
    (tmp_path / "class/infiniband/mlx5_3/device/net/enp3s0np0").mkdir(parents=True)
    reading = RoceCollector(SysfsRoot(tmp_path), FileEthtoolReader(tmp_path)).read()
    assert value(reading.samples, n.RDMA_PORT_INFO, netdev="enp3s0np0", driver="mlx5") == 1
    assert value(reading.samples, n.RDMA_PORT_RECEIVE_BYTES, device="mlx5_3") == 100


def test_without_the_ethtool_binary_pfc_is_skipped_and_everything_else_exported() -> None:
    fixture = BY_DRIVER["mlx5"]
    reader = CommandEthtoolReader(binary="ethtool-that-is-not-installed")
    exporter = build_exporter(
        fixture.directory / "sys", node=fixture.node, site=fixture.site, ethtool=reader
    )
    scraped = exporter.scrape()
    assert not {s.metric for s in scraped.samples if s.metric.startswith("nic_pfc")}
    assert value(scraped.samples, n.RDMA_CNP_SENT, device="mlx5_0") == 1200
    assert scraped.errors_total["roce"] == 0


def test_a_32_bit_counter_wrap_is_exported_raw_and_its_delta_stays_positive(
    tmp_path: Path,
) -> None:
    tree = NodeTreeBuilder(tmp_path)
    tree.rdma_port("mlx5_0", drivers.MLX5, netdev="enp12s0np0")
    timeouts = "class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err"
    exporter = build_exporter(tmp_path, node="n", site="s", ethtool_dir=tmp_path / "ethtool")

    def read() -> Sample:
        (found,) = [s for s in exporter.scrape().samples if s.metric == n.RDMA_LOCAL_ACK_TIMEOUTS]
        return found

    tree.write_value(timeouts, 2**32 - 10)
    before = read()
    tree.write_value(timeouts, 5)
    after = read()
    assert (before.value, after.value) == (2**32 - 10, 5)
    assert after.width_bits == 32
    assert counter_delta(int(before.value), int(after.value), after.width_bits) == 15
