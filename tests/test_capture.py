"""The RoCEv2 pcap decoder against scapy's full dissection, bad input, and the capture CLI."""

from __future__ import annotations

import json
import random
import shutil
import socket
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scapy.contrib.roce import BTH, _bth_opcodes, cnp
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import rdpcap

from burstscope.capture import live
from burstscope.capture.analysis import analyze_capture
from burstscope.capture.decode import SKIP_REASONS, decode
from burstscope.capture.pcap import PcapError, parse_pcap, pcap_bytes
from burstscope.capture_view import analysis_json
from burstscope.cli import main
from burstscope.detectors.packets import OPCODE_NAMES, address_text

T0 = 1_700_000_000_000_000_000
QPS = (0x11, 0x12, 0x3FF, 0xABCDEF)
MAC_SRC, MAC_DST = "02:00:00:00:00:01", "02:00:00:00:00:02"


def roce(
    qp: int,
    opcode: int = 0x0A,
    dscp: int = 26,
    ecn: int = 2,
    payload: int = 100,
    ipv6: bool = False,
    vlan: bool = False,
    fecn: bool = False,
    becn: bool = False,
    psn: int = 0,
    destination: str | None = None,
) -> bytes:
    """One RoCEv2 frame built with scapy's layers."""
    tos = dscp << 2 | ecn
    network: Any = (
        IPv6(dst=destination or "fd00::2", tc=tos)
        if ipv6
        else IP(dst=destination or "10.0.0.2", tos=tos)
    )
    l2: Any = (
        Ether(src=MAC_SRC, dst=MAC_DST) / Dot1Q(vlan=7) if vlan else Ether(src=MAC_SRC, dst=MAC_DST)
    )
    bth = (
        cnp(qp)
        if opcode == 0x81
        else BTH(opcode=opcode, dqpn=qp, psn=psn, fecn=fecn, becn=becn) / Raw(bytes(payload))
    )
    return bytes(l2 / network / UDP(sport=49152, dport=4791) / bth)


def mixed_frames(count: int, seed: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    opcodes = sorted(OPCODE_NAMES)
    frames = []
    t = T0
    for _ in range(count):
        t += rng.randrange(1_000, 400_000)
        kind = rng.random()
        if kind < 0.08:
            frame = bytes(
                Ether(src=MAC_SRC, dst=MAC_DST)
                / IP(dst="10.0.0.9")
                / UDP(dport=53)
                / Raw(b"q" * 40)
            )
        elif kind < 0.12:
            frame = bytes(Ether(src=MAC_SRC, dst=MAC_DST) / IP(dst="10.0.0.9") / TCP(dport=80))
        elif kind < 0.14:
            frame = bytes(Ether(src=MAC_SRC, dst=MAC_DST) / ARP(pdst="10.0.0.9"))
        else:
            frame = roce(
                rng.choice(QPS),
                opcode=rng.choice(opcodes),
                dscp=rng.choice((0, 26, 46)),
                ecn=rng.randrange(4),
                payload=rng.randrange(0, 1200),
                ipv6=rng.random() < 0.3,
                vlan=rng.random() < 0.2,
                fecn=rng.random() < 0.1,
                becn=rng.random() < 0.1,
                psn=rng.randrange(1 << 24),
            )
        frames.append((t, frame))
    return frames


def scapy_reference(path: Path) -> dict[str, Any]:
    """Per-QP and per-DSCP counts from scapy's full dissection of every packet."""
    per_qp: dict[tuple[str, int], Counter[str]] = {}
    per_dscp: dict[int, Counter[str]] = {}
    totals: Counter[str] = Counter()
    for packet in rdpcap(str(path)):
        if BTH not in packet or packet[UDP].dport != 4791:
            continue
        bth = packet[BTH]
        network = packet[IP] if IP in packet else packet[IPv6]
        tos = network.tos if IP in packet else network.tc
        size = len(bytes(packet))
        for counter in (
            per_qp.setdefault((str(network.dst), int(bth.dqpn)), Counter()),
            per_dscp.setdefault(tos >> 2, Counter()),
            totals,
        ):
            counter["packets"] += 1
            counter["bytes"] += size
            counter[f"op:{_bth_opcodes[bth.opcode]}"] += 1
            counter["cnp"] += bth.opcode == 0x81
            counter["ce"] += (tos & 3) == 3
            counter["fecn"] += bth.fecn
            counter["becn"] += bth.becn
    return {"qp": per_qp, "dscp": per_dscp, "totals": totals}


def _as_counter(group: dict[str, Any]) -> Counter[str]:
    counter: Counter[str] = Counter(
        packets=group["packets"],
        bytes=group["bytes"],
        cnp=group["cnp_packets"],
        ce=group["ecn_ce_packets"],
        fecn=group["fecn_packets"],
        becn=group["becn_packets"],
    )
    for name, count in group["opcodes"].items():
        counter[f"op:{name}"] = count
    return +counter


def test_opcode_table_is_scapys() -> None:
    assert _bth_opcodes == OPCODE_NAMES


def test_decoder_matches_scapy_full_dissection(tmp_path: Path) -> None:
    path = tmp_path / "mixed.pcap"
    path.write_bytes(pcap_bytes(mixed_frames(1500, seed=3)))
    reference = scapy_reference(path)
    records = parse_pcap(path.read_bytes())
    result = analysis_json(analyze_capture(records, decode(records)))
    ours_qp = {(g["destination"], g["qp"]): _as_counter(g) for g in result["queue_pairs"]}
    ours_dscp = {g["dscp"]: _as_counter(g) for g in result["traffic_classes"]}
    assert ours_qp == {k: +v for k, v in reference["qp"].items()}
    assert ours_dscp == {k: +v for k, v in reference["dscp"].items()}
    totals = reference["totals"]
    assert result["roce_packets"] == totals["packets"]
    assert result["cnp_packets"] == totals["cnp"] > 0
    assert result["ecn_ce_packets"] == totals["ce"] > 0
    assert result["skipped"]["not_udp"] > 0 and result["skipped"]["not_ip"] > 0
    assert result["skipped"]["not_roce_port"] > 0
    assert result["records"] == result["roce_packets"] + sum(result["skipped"].values())


def test_peak_is_the_busiest_millisecond() -> None:
    # 3 packets in one 1 ms bin, 1 in the next: the peak is the 3 packets' bytes per ms.
    frame = roce(0x11, payload=442)  # 500 bytes on the wire
    times = [T0 + 100_000, T0 + 400_000, T0 + 900_000, T0 + 1_500_000]
    records = parse_pcap(pcap_bytes((t, frame) for t in times))
    (qp,) = analyze_capture(records, decode(records)).queue_pairs
    assert len(frame) == 500
    assert qp.peak_bytes_per_second_1ms == 1500 * 1000


def test_congestion_over_time_and_flags() -> None:
    frames = [
        (T0 + 10, roce(0x11, ecn=3)),
        (T0 + 20, roce(0x11, opcode=0x81)),
        (T0 + 2_000_000, roce(0x11, fecn=True, ecn=2)),
        (T0 + 2_000_010, roce(0x11, becn=True, ecn=3)),
        (T0 + 5_000_000, roce(0x11)),
    ]
    records = parse_pcap(pcap_bytes(frames))
    result = analysis_json(analyze_capture(records, decode(records)))
    assert result["congestion_1ms"] == [
        {
            "start_ns": T0,
            "ecn_ce_packets": 1,
            "cnp_packets": 1,
            "fecn_packets": 0,
            "becn_packets": 1,  # cnp() sets BECN, as RoCEv2 CNPs do
        },
        {
            "start_ns": T0 + 2_000_000,
            "ecn_ce_packets": 1,
            "cnp_packets": 0,
            "fecn_packets": 1,
            "becn_packets": 1,
        },
    ]


def test_microsecond_and_big_endian_pcaps() -> None:
    frame = roce(0x11)
    header = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    record = struct.pack(">IIII", 1_700_000_000, 123_456, len(frame), len(frame)) + frame
    records = parse_pcap(header + record)
    assert records.timestamp_ns.tolist() == [1_700_000_000_123_456_000]
    assert len(decode(records)) == 1


def test_address_text() -> None:
    assert address_text(b"\0" * 10 + b"\xff\xff" + socket.inet_aton("10.1.2.3")) == "10.1.2.3"
    assert address_text(socket.inet_pton(socket.AF_INET6, "fd00::2")) == "fd00::2"


# --- Bad input: counted and skipped, never a crash -------------------------------------


def _mutate(rng: random.Random, frame: bytes) -> tuple[bytes, int]:
    data = bytearray(frame)
    wire = len(data)
    choice = rng.randrange(8)
    if choice == 0:  # flip bytes in the headers
        for _ in range(rng.randrange(1, 5)):
            data[rng.randrange(min(len(data), 80))] = rng.randrange(256)
    elif choice == 1:  # cut the capture short (snaplen or a broken capture)
        data = data[: rng.randrange(len(data))]
    elif choice == 2:  # a BTH version that is not 0
        data[14 + 20 + 8 + 1] |= rng.randrange(1, 16)
    elif choice == 3:  # UDP length anywhere in 0..65535
        data[14 + 20 + 4 : 14 + 20 + 6] = rng.randrange(65536).to_bytes(2, "big")
    elif choice == 4:  # any opcode, most of them unknown
        data[14 + 20 + 8] = rng.randrange(256)
    elif choice == 5:  # IHL and IP total length anywhere
        data[14] = 0x40 | rng.randrange(16)
        data[16:18] = rng.randrange(65536).to_bytes(2, "big")
    elif choice == 6:  # a wire length shorter than the frame claims
        wire = rng.randrange(1, len(data) + 1)
        data = data[:wire]
    else:  # random garbage of a random length
        data = bytearray(rng.randbytes(rng.randrange(0, 120)))
    return bytes(data), wire


def test_ten_thousand_mutated_packets_are_counted_never_crash() -> None:
    rng = random.Random(11)
    templates = [roce(qp, opcode=op) for qp in QPS[:2] for op in (0x06, 0x07, 0x81, 0x11)]
    mutated = 12_000
    frames = [_mutate(rng, rng.choice(templates)) for _ in range(mutated)]
    header = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)
    body = b"".join(
        struct.pack("<IIII", 1_700_000_000, i, len(f), wire) + f
        for i, (f, wire) in enumerate(frames)
    )
    records = parse_pcap(header + body)
    assert len(records) == mutated
    decoded = decode(records)
    skipped = decoded.skipped
    assert len(decoded) + sum(skipped.values()) == mutated
    for reason in ("short_frame", "bad_length", "bad_bth_version", "unknown_opcode"):
        assert skipped[reason] > 0, reason
    # What was decoded is consistent: known opcodes, version 0 (checked by decoding).
    assert set(np.unique(decoded.opcode).tolist()) <= set(OPCODE_NAMES)
    assert (decoded.dqpn >= 0).all() and (decoded.dqpn < 1 << 24).all()
    analysis_json(analyze_capture(records, decoded))  # and the statistics survive it


def test_truncated_and_corrupt_files(tmp_path: Path) -> None:
    whole = pcap_bytes(mixed_frames(200, seed=5))
    rng = random.Random(2)
    for cut in sorted(rng.sample(range(24, len(whole)), 300)):
        records = parse_pcap(whole[:cut])
        decoded = decode(records)
        assert len(decoded) + sum(decoded.skipped.values()) == len(records)
    # A record header claiming 1 GiB ends the walk and is counted.
    first_record = 24
    corrupt = bytearray(whole)
    length = struct.unpack_from("<I", corrupt, first_record + 8)[0]
    second = first_record + 16 + length
    corrupt[second + 8 : second + 12] = struct.pack("<I", 1 << 30)
    records = parse_pcap(bytes(corrupt))
    assert len(records) == 1 and records.corrupt_records == 1
    for bad, message in (
        (b"", "shorter than a pcap global header"),
        (b"\x0a\x0d\x0d\x0a" + bytes(40), "pcapng"),
        (b"GIF89a" + bytes(40), "not a pcap file"),
        (struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 147), "link type 147"),
    ):
        with pytest.raises(PcapError, match=message):
            parse_pcap(bad)


# --- The command ---------------------------------------------------------------------


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["capture", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mixed.pcap"
    path.write_bytes(pcap_bytes(mixed_frames(300, seed=8)))
    status, out, _ = run_cli(["--pcap", str(path), "--json"], capsys)
    assert status == 0
    data = json.loads(out)
    assert data["roce_packets"] > 0 and "cnp_packets" in data and data["pcap"] == str(path)
    status, out, _ = run_cli(["--pcap", str(path)], capsys)
    assert status == 0 and "per destination QP:" in out and "RoCEv2 packets" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pcap", "/nonexistent.pcap"], "cannot read"),
        (["--interface", "lo"], "needs a positive --duration"),
        (["--pcap", "x.pcap", "--write", "y.pcap"], "needs --interface"),
        (["--pcap", "x.pcap", "--coflows", "m.txt"], "--line-rate"),
    ],
)
def test_cli_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run_cli(args, capsys)
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_cli_corrupt_pcap_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.pcap"
    path.write_bytes(b"not a capture at all, just text\n")
    status, _, err = run_cli(["--pcap", str(path)], capsys)
    assert status == 2 and "not a pcap file" in err and len(err.strip().splitlines()) == 1


def test_capture_without_cap_net_raw(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse() -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(live, "_packet_socket", refuse)
    status, _, err = run_cli(["--interface", "lo", "--duration", "0.1"], capsys)
    assert status == 2 and "CAP_NET_RAW" in err and len(err.strip().splitlines()) == 1


def test_capture_without_cap_net_raw_for_real() -> None:
    # The real kernel refusal: the same command with CAP_NET_RAW removed from the
    # bounding set (so even root lacks it after exec).
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    done = subprocess.run(
        [
            setpriv,
            "--bounding-set=-net_raw",
            "--inh-caps=-net_raw",
            sys.executable,
            "-m",
            "burstscope.cli",
            "capture",
            "--interface",
            "lo",
            "--duration",
            "0.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "setpriv" in done.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()}")
    assert done.returncode == 2, done.stderr
    assert "CAP_NET_RAW" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_skip_reasons_are_stable() -> None:
    # JSON consumers key on these names.
    assert SKIP_REASONS == (
        "short_frame",
        "not_ip",
        "bad_ip_header",
        "ip_fragment",
        "not_udp",
        "not_roce_port",
        "bad_length",
        "bad_bth_version",
        "unknown_opcode",
    )
