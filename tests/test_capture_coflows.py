"""Coflow collisions on a constructed pcap whose answer is known; mapping file errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from burstscope.capture.coflows import MappingError, parse_mapping
from burstscope.capture.pcap import pcap_bytes
from burstscope.cli import main
from tests.test_capture import MAC_DST, MAC_SRC, T0, roce

MS = 1_000_000
# 8 Mb/s = 1000 bytes per ms: two 500-byte frames in a bin saturate the link.
LINE_RATE_GBITS = "0.008"
MAPPING = """\
# SELECTOR   TYPE  MICRO-BATCH  LAYER
qp=0x20      DP    0            5
qp=0x10      EP    0            2     # urgent: same micro-batch, EP before DP
qp=0x11      EP    1            1
dscp=10      DP    1            0
qp=0x30      DP    2            7
qp=0x31      DP    2            8
"""


def frame(qp: int, dscp: int = 26) -> bytes:
    built = roce(qp, dscp=dscp, payload=442)
    assert len(built) == 500
    return built


def constructed() -> list[tuple[int, bytes]]:
    frames = []
    # 1. DP alone for 3 ms, then EP joins for 4 ms, sharing the saturated link: the DP
    #    coflow arrived first, Hermod would have served EP first -> out of order; the EP
    #    coflow's 4 x 500 bytes waited.
    for b in range(0, 3):
        frames += [(T0 + b * MS + 100_000, frame(0x20)), (T0 + b * MS + 600_000, frame(0x20))]
    for b in range(3, 7):
        frames += [(T0 + b * MS + 200_000, frame(0x10)), (T0 + b * MS + 700_000, frame(0x20))]
    # 2. EP (micro-batch 1) first, a DP coflow selected by DSCP joins: in order.
    frames += [(T0 + 20 * MS + 100_000, frame(0x11)), (T0 + 20 * MS + 600_000, frame(0x11))]
    for b in (21, 22):
        frames += [(T0 + b * MS + 100_000, frame(0x11)), (T0 + b * MS + 600_000, frame(0x99, 10))]
    # 3. Two DP coflows at line rate: same type, no collision.
    for b in (30, 31):
        frames += [(T0 + b * MS + 100_000, frame(0x30)), (T0 + b * MS + 600_000, frame(0x31))]
    # 4. EP and DP together below 90%: no collision.
    for b in (40, 41):
        frames += [(T0 + b * MS + 100_000, frame(0x10)), (T0 + b * MS + 600_000, roce(0x20))]
    # 5. DP plus non-RoCE bytes at line rate: one type only.
    tcp = bytes(Ether(src=MAC_SRC, dst=MAC_DST) / IP() / TCP() / Raw(bytes(446)))
    frames += [(T0 + 50 * MS + 100_000, frame(0x20)), (T0 + 50 * MS + 600_000, tcp)]
    return sorted(frames)


def run_capture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mapping: str, *extra: str
) -> tuple[int, str, str]:
    pcap = tmp_path / "coflows.pcap"
    pcap.write_bytes(pcap_bytes(constructed()))
    mapping_file = tmp_path / "mapping.txt"
    mapping_file.write_text(mapping)
    status = main(
        [
            "capture",
            "--pcap",
            str(pcap),
            "--coflows",
            str(mapping_file),
            *extra,
            "--line-rate",
            LINE_RATE_GBITS,
        ]
    )
    out, err = capsys.readouterr()
    return status, out, err


def test_collisions_on_a_constructed_pcap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_capture(tmp_path, capsys, MAPPING, "--json")
    assert status == 0, err
    report = json.loads(out)["coflows"]
    assert report["unmapped_packets"] == 0
    assert report["collisions"] == [
        {
            "start_ns": T0 + 3 * MS,
            "end_ns": T0 + 7 * MS,
            "moments": 4,
            "peak_utilization": 1.0,
            "coflows": [
                # In Hermod's order.
                {"name": "EP/mb0/L2", "bytes": 2000, "arrival_ns": T0 + 3 * MS + 200_000},
                {"name": "DP/mb0/L5", "bytes": 2000, "arrival_ns": T0 + 100_000},
            ],
            "first": "DP/mb0/L5",
            "hermod_first": "EP/mb0/L2",
            "in_order": False,
            "urgent_bytes_waited": 2000,
        },
        {
            "start_ns": T0 + 21 * MS,
            "end_ns": T0 + 23 * MS,
            "moments": 2,
            "peak_utilization": 1.0,
            "coflows": [
                {"name": "EP/mb1/L1", "bytes": 1000, "arrival_ns": T0 + 20 * MS + 100_000},
                {"name": "DP/mb1/L0", "bytes": 1000, "arrival_ns": T0 + 21 * MS + 600_000},
            ],
            "first": "EP/mb1/L1",
            "hermod_first": "EP/mb1/L1",
            "in_order": True,
            "urgent_bytes_waited": 0,
        },
    ]
    assert (report["moments"], report["out_of_order"], report["urgent_bytes_waited"]) == (
        6,
        1,
        2000,
    )


def test_collisions_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_capture(tmp_path, capsys, MAPPING)
    assert status == 0
    assert "coflow collisions: 2 (6 saturated ms), 1 served out of Hermod's order" in out
    assert "OUT OF ORDER" in out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("qp=1 EP 0\n", "mapping.txt:1: expected SELECTOR TYPE MICRO-BATCH LAYER, got 3"),
        ("# ok\nqp=1 XP 0 1\n", "mapping.txt:2: type 'XP' is not EP, PP or DP"),
        ("qp=x EP 0 1\n", "mapping.txt:1: selector 'qp=x' is not qp=N or dscp=N"),
        ("dscp=64 EP 0 1\n", "mapping.txt:1: dscp 64 is out of range 0..63"),
        ("qp=0x1000000 EP 0 1\n", "qp 16777216 is out of range"),
        ("qp=1 EP -1 1\n", "mapping.txt:1: micro-batch '-1' is not a whole number >= 0"),
        ("qp=1 EP 0 one\n", "mapping.txt:1: layer 'one' is not a whole number >= 0"),
        ("qp=1 EP 0 1\nqp=0x1 DP 0 1\n", "mapping.txt:2: qp=1 is mapped twice"),
        ("# nothing\n\n", "no mappings"),
    ],
)
def test_mapping_errors_name_the_line(
    text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run_capture(tmp_path, capsys, text)
    assert status == 2
    assert problem in err and len(err.strip().splitlines()) == 1


def test_mapping_parse_shares_coflows() -> None:
    mapping = parse_mapping("qp=1 ep 0 1\nqp=2 EP 0 1\ndscp=3 DP 0 1\n")
    assert len(mapping.coflows) == 2
    with pytest.raises(MappingError):
        parse_mapping("qp=1\n")


def test_a_mapped_coflow_that_sent_nothing_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_capture(tmp_path, capsys, MAPPING, "--json")
    assert status == 0, err
    silent = MAPPING + "qp=0x77      PP    0            9     # sent no packet\n"
    status, with_silent, err = run_capture(tmp_path, capsys, silent, "--json")
    assert status == 0, err
    assert (
        json.loads(with_silent)["coflows"]["collisions"] == json.loads(out)["coflows"]["collisions"]
    )
