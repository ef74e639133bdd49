"""The SIOCETHTOOL source: encoders and decoders on built buffers, then a real veth pair."""

from __future__ import annotations

import os
import re
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from burstscope.collector.sources.base import SourceError
from burstscope.collector.sources.ethtool import (
    DEFAULT_STAT_PATTERN,
    ETH_GSTRING_LEN,
    ETHTOOL_GSSET_INFO,
    ETHTOOL_GSTATS,
    ETHTOOL_GSTRINGS,
    EthtoolSource,
    EthtoolStats,
    decode_gstats,
    decode_gstrings,
    decode_sset_info,
    encode_gstats_request,
    encode_gstrings_request,
    encode_ifreq,
    encode_sset_info_request,
)
from burstscope.detectors.counters import RESETTING_64
from tests.conftest import integration_unavailable, require_binary, require_root


def test_sset_info_request_layout() -> None:
    # struct ethtool_sset_info: cmd, reserved, sset_mask = 1 << ETH_SS_STATS, one u32 slot.
    assert bytes(encode_sset_info_request()) == struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 2, 0)


@pytest.mark.parametrize(
    ("reply", "count"),
    [
        (struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 2, 93), 93),
        # The kernel clears the mask bit when the driver has no such set (lo, dummy).
        (struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 0, 0), 0),
        (struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 2, 0), 0),
    ],
)
def test_decode_sset_info(reply: bytes, count: int) -> None:
    assert decode_sset_info(reply) == count


def test_gstrings_round_trip_from_the_documented_layout() -> None:
    request = encode_gstrings_request(3)
    assert struct.unpack_from("=III", request) == (ETHTOOL_GSTRINGS, 1, 3)
    # Room beyond the three names, so a grown set on an old kernel cannot overrun.
    assert len(request) > 12 + 3 * ETH_GSTRING_LEN
    names = [b"rx_prio3_pause", b"tx_bytes_phy", b"x" * ETH_GSTRING_LEN]
    reply = struct.pack("=III", ETHTOOL_GSTRINGS, 1, 3) + b"".join(
        n.ljust(ETH_GSTRING_LEN, b"\0") for n in names
    )
    assert decode_gstrings(reply) == ["rx_prio3_pause", "tx_bytes_phy", "x" * 32]


@pytest.mark.parametrize(
    "values",
    [[], [0], [1, 2**64 - 1, 12345678901234]],
)
def test_gstats_round_trip(values: list[int]) -> None:
    request = encode_gstats_request(len(values))
    assert struct.unpack_from("=II", request) == (ETHTOOL_GSTATS, len(values))
    reply = struct.pack(f"=II{len(values)}Q", ETHTOOL_GSTATS, len(values), *values)
    assert decode_gstats(reply) == values


def test_ifreq_is_a_whole_struct_ifreq() -> None:
    ifreq = encode_ifreq("eth0", 0x1234)
    assert len(ifreq) == 40  # sizeof(struct ifreq) on LP64
    assert ifreq[:16] == b"eth0".ljust(16, b"\0")
    assert struct.unpack_from("@P", ifreq, 16)[0] == 0x1234


@pytest.mark.parametrize("name", ["", "a" * 16, "bad/name", "nul\0"])
def test_ifreq_rejects_names_the_kernel_would_not(name: str) -> None:
    with pytest.raises(SourceError, match="invalid interface name"):
        encode_ifreq(name, 0)


@pytest.mark.parametrize(
    ("stat", "reported"),
    [
        ("rx_prio0_pause", True),
        ("tx_prio7_pause_duration", True),
        ("rx_prio3_bytes", True),
        ("tx_bytes_phy", True),
        ("rx_pause_ctrl_phy", True),
        ("rx_discards_phy", True),
        ("rx_prio3_packets", False),
        ("rx_prio3_pause_transition", False),
        ("rx_bytes", False),
        ("rx_vport_rdma_unicast_bytes", False),
    ],
)
def test_default_filter_keeps_pfc_and_phy_counters(stat: str, reported: bool) -> None:
    assert (re.fullmatch(DEFAULT_STAT_PATTERN, stat) is not None) is reported


def test_unknown_interface_is_a_clear_error() -> None:
    source = EthtoolSource("bsnope0")
    with pytest.raises(SourceError, match="unknown interface 'bsnope0'"):
        source.open()


def test_loopback_has_no_driver_stats() -> None:
    # Read-only: lo has no get_sset_count, which is "no stats", not an error.
    with EthtoolStats("lo") as stats:
        assert stats.names() == []
    source = EthtoolSource("lo", pattern=None)
    source.open()
    try:
        assert source.poll() == []
    finally:
        source.close()


def test_eth0_read_only_when_present() -> None:
    if not Path("/sys/class/net/eth0").exists():
        pytest.skip("no eth0 on this machine")
    with EthtoolStats("eth0") as stats:
        names = stats.names()
        values = stats.values(len(names))
    assert len(values) == len(names)
    assert all(name and len(name) < ETH_GSTRING_LEN for name in names)


@pytest.fixture
def veth_pair() -> Iterator[tuple[str, str]]:
    """A veth pair with unique names, deleted afterwards whatever happens."""
    require_root()
    ip = require_binary("ip")
    left, right = f"bsT{os.getpid()}", f"bsT{os.getpid()}p"
    created = subprocess.run(
        [ip, "link", "add", left, "type", "veth", "peer", "name", right],
        capture_output=True,
        text=True,
        check=False,
    )
    if created.returncode != 0:
        integration_unavailable(f"cannot create a veth pair: {created.stderr.strip()}")
    try:
        yield left, right
    finally:
        subprocess.run([ip, "link", "del", left], capture_output=True, check=False)


@pytest.mark.integration
def test_veth_stats_through_the_real_ioctl(veth_pair: tuple[str, str]) -> None:
    left, right = veth_pair
    source = EthtoolSource(left, pattern=None)
    source.open()
    try:
        readings = {r.name: r for r in source.poll()}
    finally:
        source.close()
    # veth_get_ethtool_stats (drivers/net/veth.c): the peer's ifindex first, then per-queue
    # XDP counters. The peer's ifindex is checked against sysfs: a real cross-check.
    peer_ifindex = int(Path(f"/sys/class/net/{right}/ifindex").read_text())
    assert readings["peer_ifindex"].value == peer_ifindex
    assert readings["peer_ifindex"].counter is None  # a value, not a counter
    assert readings["rx_queue_0_xdp_packets"].counter == RESETTING_64
    assert readings["rx_queue_0_xdp_packets"].value == 0
    assert {r.device for r in readings.values()} == {left}
    assert source.name == f"ethtool:{left}"


@pytest.mark.integration
def test_veth_default_filter_reports_nothing_without_pfc(veth_pair: tuple[str, str]) -> None:
    left, _ = veth_pair
    source = EthtoolSource(left, device="mlx5_1", port=1)
    source.open()
    try:
        assert source.stat_names == ()
        assert source.poll() == []
    finally:
        source.close()
    narrow = EthtoolSource(left, pattern=r"peer_ifindex|rx_queue_\d+_xdp_bytes", device="mlx5_1")
    narrow.open()
    try:
        assert narrow.stat_names == ("peer_ifindex", "rx_queue_0_xdp_bytes")
        assert [(r.device, r.port) for r in narrow.poll()] == [("mlx5_1", 1)] * 2
    finally:
        narrow.close()


@pytest.mark.integration
def test_interface_that_vanishes_fails_the_poll_clearly(veth_pair: tuple[str, str]) -> None:
    left, _ = veth_pair
    source = EthtoolSource(left, pattern=None)
    source.open()
    try:
        subprocess.run([require_binary("ip"), "link", "del", left], check=True)
        with pytest.raises(SourceError, match=f"unknown interface '{left}'"):
            source.poll()
    finally:
        source.close()
