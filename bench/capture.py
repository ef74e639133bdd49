"""Pcap decode speed (vectorized vs scapy dissection, one run) and generator line-rate share.

Prints ONE JSON line. The pcap is synthetic RoCEv2 (IPv4/IPv6, VLAN, CNP, some non-RoCE)
captured with a 128-byte snaplen, as ``burstscope capture`` keeps headers only. The
generator figure needs root (it builds the namespace testbed); otherwise it is null with
the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burstscope.capture.decode import decode
from burstscope.capture.pcap import NANOSECOND_MAGIC, parse_pcap

SNAPLEN = 128


def synthetic_pcap(packets: int, seed: int = 1) -> bytes:
    from scapy.contrib.roce import BTH, cnp
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw

    rng = random.Random(seed)
    templates = []
    for i in range(64):
        network: Any = IPv6(dst="fd00::2", tc=0x68) if i % 4 == 0 else IP(dst="10.0.0.2", tos=0x6A)
        mac = ("02:00:00:00:00:01", "02:00:00:00:00:02")
        l2: Any = (
            Ether(src=mac[0], dst=mac[1]) / Dot1Q(vlan=5)
            if i % 5 == 0
            else Ether(src=mac[0], dst=mac[1])
        )
        if i % 16 == 0:
            l4: Any = UDP(dport=4791) / cnp(0x100 + i)
        elif i % 13 == 0:
            l4 = UDP(dport=53) / Raw(bytes(60))
        else:
            l4 = UDP(dport=4791) / BTH(opcode=rng.choice((6, 7, 8, 10)), dqpn=0x100 + i % 8)
            l4 /= Raw(bytes(rng.choice((256, 1024, 4096))))
        templates.append(bytes(l2 / network / l4))
    header = struct.pack("<IHHiIII", NANOSECOND_MAGIC, 2, 4, 0, 0, SNAPLEN, 1)
    parts = [header]
    pack = struct.Struct("<IIII").pack
    t = 1_700_000_000_000_000_000
    for i in range(packets):
        frame = templates[i % 64]
        t += 2_000
        kept = frame[:SNAPLEN]
        seconds, nanoseconds = divmod(t, 1_000_000_000)
        parts.append(pack(seconds, nanoseconds, len(kept), len(frame)))
        parts.append(kept)
    return b"".join(parts)


def vectorized_rate(raw: bytes, repeats: int = 3) -> tuple[float, int]:
    best = float("inf")
    decoded = 0
    for _ in range(repeats):
        started = time.perf_counter()
        records = parse_pcap(raw)
        result = decode(records)
        best = min(best, time.perf_counter() - started)
        decoded = len(result)
    return len(parse_pcap(raw)) / best, decoded


def scapy_rate(raw: bytes, packets: int) -> float:
    from scapy.utils import PcapReader

    records = parse_pcap(raw)
    end = int(records.frame_offset[packets - 1] + records.captured_length[packets - 1])
    with tempfile.NamedTemporaryFile(suffix=".pcap") as handle:
        handle.write(raw[:end])
        handle.flush()
        started = time.perf_counter()
        count = 0
        with PcapReader(handle.name) as reader:
            for packet in reader:
                packet.layers()  # full dissection happened on read
                count += 1
        elapsed = time.perf_counter() - started
    return count / elapsed


def generator_share(seconds: float) -> tuple[float | None, str | None]:
    if os.geteuid() != 0:
        return None, "needs root to build the namespace testbed"
    from burstscope.testing.testbed import RECEIVER_ADDRESS, SENDER_ADDRESS, Testbed, TestbedError

    try:
        with Testbed() as bed, tempfile.TemporaryDirectory() as work:
            truth = Path(work) / "truth.json"
            done = subprocess.run(
                [
                    *bed.exec_prefix(),
                    *(
                        sys.executable,
                        "-m",
                        "burstscope.testing.rocegen",
                        "--duration",
                        str(seconds),
                    ),
                    *("--source", SENDER_ADDRESS, "--destination", RECEIVER_ADDRESS),
                    *("--truth", str(truth)),
                ],
                capture_output=True,
                text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
            if done.returncode != 0:
                return None, f"generator failed: {done.stderr.strip().splitlines()[-1:]}"
            share = json.loads(truth.read_text())["achieved_share"]
            return (None if share is None else round(float(share), 4)), None
    except TestbedError as exc:
        return None, f"testbed: {exc}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON line (default)")
    parser.add_argument("--packets", type=int, default=1_000_000)
    parser.add_argument("--scapy-packets", type=int, default=3_000)
    parser.add_argument("--generator-seconds", type=float, default=5.0)
    args = parser.parse_args()
    raw = synthetic_pcap(args.packets)
    vectorized, decoded = vectorized_rate(raw)
    reference = scapy_rate(raw, min(args.scapy_packets, args.packets))
    share, reason = generator_share(args.generator_seconds)
    result = {
        "bench": "capture",
        "packets": args.packets,
        "roce_decoded": decoded,
        "vectorized_packets_per_second": round(vectorized),
        "scapy_packets_per_second": round(reference),
        "speedup_vs_scapy": round(vectorized / reference, 1),
        "targets_met": {
            "vectorized_1M_per_second": vectorized >= 1e6,
            "speedup_100x": vectorized / reference >= 100,
            "generator_95_percent": None if share is None else share >= 0.95,
        },
        "generator_line_rate_share": share,
        "generator_reason": reason,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
