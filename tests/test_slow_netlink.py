"""RDMA netlink: requests and replies built byte by byte from rdma_netlink.h; the real socket."""

from __future__ import annotations

import errno
import logging
import struct
from collections.abc import Sequence

import pytest

from burstscope.collector.discovery import discover
from burstscope.collector.sources import rdma_netlink
from burstscope.collector.sources.base import SourceError
from burstscope.collector.sources.hw_counters import HwCountersSysfsSource
from burstscope.collector.sources.infiniband import choose_hw_counter_source
from burstscope.collector.sources.rdma_netlink import (
    NetlinkError,
    PortStatistics,
    RdmaDevice,
    RdmaNetlinkSource,
    decode_attributes,
    decode_device,
    decode_messages,
    decode_stat_reply,
    encode_device_dump,
    encode_stat_get,
)
from tests.conftest import SYSFS

# Written out from include/uapi/rdma/rdma_netlink.h rather than imported, so a typo in the
# module's constants cannot agree with itself.
STAT_GET_TYPE = (5 << 10) | 17  # RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_GET)
GET_TYPE = (5 << 10) | 1  # RDMA_NLDEV_CMD_GET
DEV_INDEX, DEV_NAME, PORT_INDEX = 1, 2, 3
HWCOUNTERS, ENTRY, ENTRY_NAME, ENTRY_VALUE = 80, 81, 82, 83
NESTED = 0x8000


def nlattr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def nlmsg(kind: int, flags: int, seq: int, payload: bytes, pid: int = 0) -> bytes:
    return struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, pid) + payload


def counter_entry(name: str, value: int, pad: bool = False) -> bytes:
    fields = nlattr(ENTRY_NAME, name.encode() + b"\0")
    if pad:
        # nla_put_u64_64bit adds a zero-length RDMA_NLDEV_ATTR_PAD where u64 needs aligning.
        fields += nlattr(0, b"")
    fields += nlattr(ENTRY_VALUE, struct.pack("=Q", value))
    return nlattr(ENTRY | NESTED, fields)


def stat_reply(seq: int, counters: list[tuple[str, int]]) -> bytes:
    """What stat_get_doit_default_counter sends for mlx5_1 (index 3) port 1."""
    table = b"".join(counter_entry(n, v, pad=i % 2 == 1) for i, (n, v) in enumerate(counters))
    payload = (
        nlattr(DEV_INDEX, struct.pack("=I", 3))
        + nlattr(DEV_NAME, b"mlx5_1\0")
        + nlattr(PORT_INDEX, struct.pack("=I", 1))
        + nlattr(HWCOUNTERS | NESTED, table)
    )
    return nlmsg(STAT_GET_TYPE, 0, seq, payload, pid=1234)


MLX5_COUNTERS = [
    ("rx_write_requests", 4_000_000_000),
    ("out_of_buffer", 17),
    ("out_of_sequence", 12),
    ("np_cnp_sent", 1520),
    ("rp_cnp_handled", 1498),
    ("np_ecn_marked_roce_packets", 2**40 + 7),
    ("rx_icrc_encapsulated", 0),
]


def test_stat_get_request_bytes() -> None:
    expected = (
        struct.pack("=IHHII", 32, STAT_GET_TYPE, 0x1 | 0x4, 7, 0)
        + struct.pack("=HHI", 8, DEV_INDEX, 3)
        + struct.pack("=HHI", 8, PORT_INDEX, 2)
    )
    assert encode_stat_get(7, device_index=3, port=2) == expected


def test_device_dump_request_bytes() -> None:
    assert encode_device_dump(9) == struct.pack("=IHHII", 16, GET_TYPE, 0x1 | 0x300, 9, 0)


def test_decode_a_realistic_stat_reply() -> None:
    messages = list(decode_messages(stat_reply(7, MLX5_COUNTERS)))
    assert [(m.type, m.seq) for m in messages] == [(STAT_GET_TYPE, 7)]
    assert decode_stat_reply(messages[0].payload) == PortStatistics(
        device_index=3, device="mlx5_1", port=1, counters=dict(MLX5_COUNTERS)
    )


def test_a_dump_with_several_messages_in_one_datagram() -> None:
    def device(index: int, name: str, ports: int) -> bytes:
        payload = (
            nlattr(DEV_INDEX, struct.pack("=I", index))
            + nlattr(DEV_NAME, name.encode() + b"\0")
            + nlattr(PORT_INDEX, struct.pack("=I", ports))
            + nlattr(5, b"28.39.1002\0")  # RDMA_NLDEV_ATTR_FW_VERSION, ignored
        )
        return nlmsg(GET_TYPE, 0x2, 4, payload)

    datagram = device(0, "mlx5_0", 1) + device(1, "irdma0", 1) + nlmsg(3, 0x2, 4, b"\0" * 4)
    messages = list(decode_messages(datagram))
    assert [m.type for m in messages] == [GET_TYPE, GET_TYPE, 3]
    assert [decode_device(m.payload) for m in messages[:2]] == [
        RdmaDevice(0, "mlx5_0", 1),
        RdmaDevice(1, "irdma0", 1),
    ]


@pytest.mark.parametrize(
    ("code", "raises"),
    [(0, False), (-errno.EINVAL, True), (-errno.EOPNOTSUPP, True)],
)
def test_error_replies(code: int, raises: bool) -> None:
    original = encode_stat_get(5, 0, 1)[:16]
    datagram = nlmsg(2, 0, 5, struct.pack("=i", code) + original)
    if raises:
        with pytest.raises(NetlinkError) as caught:
            list(decode_messages(datagram))
        assert caught.value.errno == -code
    else:
        assert [m.type for m in decode_messages(datagram)] == [2]  # the ACK


@pytest.mark.parametrize(
    "broken",
    [
        stat_reply(1, MLX5_COUNTERS)[:-3],  # cut inside the last attribute
        struct.pack("=IHHII", 8, STAT_GET_TYPE, 0, 1, 0),  # length below the header
    ],
)
def test_truncated_messages_are_rejected(broken: bytes) -> None:
    with pytest.raises(ValueError, match="truncated"):
        for message in decode_messages(broken):
            decode_stat_reply(message.payload)


def test_attribute_flags_are_masked() -> None:
    data = nlattr(HWCOUNTERS | NESTED, b"") + nlattr(DEV_INDEX | 0x4000, struct.pack("=I", 1))
    assert [kind for kind, _ in decode_attributes(data)] == [HWCOUNTERS, DEV_INDEX]


def test_reply_without_identity_is_rejected() -> None:
    with pytest.raises(ValueError, match="DEV_INDEX"):
        decode_stat_reply(nlattr(HWCOUNTERS | NESTED, counter_entry("x", 1)))


def test_real_kernel_socket() -> None:
    """On this kernel: either RDMA netlink answers a device dump, or the socket is refused."""
    try:
        link = rdma_netlink.RdmaNetlink()
    except OSError as exc:
        assert exc.errno in (errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT)
        assert "NETLINK_RDMA" in (rdma_netlink.probe(["mlx5_0"]) or "")
        return
    try:
        devices = link.devices()
    finally:
        link.close()
    assert all(d.name and d.index >= 0 for d in devices)


def test_source_open_on_this_kernel_fails_or_names_devices() -> None:
    # EPROTONOSUPPORT without RDMA netlink; with it, the device is not listed.
    source = RdmaNetlinkSource([("bs-no-such-device", 1)])
    with pytest.raises((OSError, SourceError)):
        source.open()
    source.close()


def test_choose_falls_back_to_sysfs_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    ports = [p for p in discover(SYSFS).ports if p.link_layer == "Ethernet"]
    with caplog.at_level(logging.INFO, logger="burstscope.collector.sources.infiniband"):
        chosen = choose_hw_counter_source(ports, probe=lambda _: "no NETLINK_RDMA socket")
    assert isinstance(chosen, HwCountersSysfsSource)
    assert [r.getMessage() for r in caplog.records] == [
        "hw counters from sysfs hw_counters/ instead of RDMA netlink: no NETLINK_RDMA socket"
    ]


def test_choose_prefers_netlink_when_the_kernel_offers_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ports = [p for p in discover(SYSFS).ports if p.link_layer == "Ethernet"]
    asked: list[list[str]] = []

    def probe(devices: Sequence[str]) -> str | None:
        asked.append(list(devices))
        return None

    with caplog.at_level(logging.INFO):
        chosen = choose_hw_counter_source(ports, probe=probe)
    assert isinstance(chosen, RdmaNetlinkSource)
    # irdma0 is sampled from hw_counters/ now, and its hw counters go the same way.
    assert list(chosen.ports) == [("irdma0", 1), ("mlx5_1", 1)]
    assert asked == [["irdma0", "mlx5_1"]]
    assert caplog.records == []


def test_choose_on_this_kernel_uses_the_real_probe(caplog: pytest.LogCaptureFixture) -> None:
    ports = [p for p in discover(SYSFS).ports if p.link_layer == "Ethernet"]
    with caplog.at_level(logging.INFO, logger="burstscope.collector.sources.infiniband"):
        chosen = choose_hw_counter_source(ports)
    # The fixture's mlx5_1 is not a device of this kernel, so netlink cannot serve it.
    assert isinstance(chosen, HwCountersSysfsSource)
    assert len(caplog.records) == 1
