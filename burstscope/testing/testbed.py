"""A two-namespace veth testbed shaped to a line rate with tbf: real kernel counters, no NIC.

Layout (names carry this process's pid so parallel runs never collide)::

    netns bs-<pid>-tx                      netns bs-<pid>-rx
    vtx 10.203.77.1/30  ==== veth ====  vrx 10.203.77.2/30
    root qdisc: tbf rate R (the "NIC")

The /30 exists only inside the two namespaces, so nothing sent into it can leave them.
The sender and the recorder run inside ``bs-<pid>-tx`` (``ip netns exec`` remounts /sys
for that namespace, so ``--source netdev:vtx`` reads the veth's own counters there).

Command line: ``python -m burstscope.testing.testbed cleanup`` deletes namespaces left by runs
that crashed (their pid is gone); ``python -m burstscope.testing.testbed up`` creates a testbed,
prints its names and waits until interrupted, then tears it down.

Why it ships in the package rather than only in tests/: it is how an operator checks
burstscope against real kernel counters on a node of their own before trusting it on
a fabric (docs/testing-without-hardware.md), with nothing but iproute2 and root. Nothing
in the agent imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType

PREFIX = "bs-"
SENDER_INTERFACE = "vtx"
RECEIVER_INTERFACE = "vrx"
SENDER_ADDRESS = "10.203.77.1"
RECEIVER_ADDRESS = "10.203.77.2"
PREFIX_LENGTH = 30
# Jumbo frames like a RoCE fabric (RoCE path MTU 4096 fits): 4 KiB payloads keep the
# packet rate a Python sender must sustain at 1 Gb/s near 30 k/s instead of 85 k/s.
MTU = 9000
_STALE = re.compile(rf"^{PREFIX}(\d+)-(tx|rx)$")


class TestbedError(Exception):
    """The testbed cannot be built; the message names the command and the kernel's reason."""


def _ip() -> str:
    found = shutil.which("ip") or ("/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else None)
    if found is None:
        raise TestbedError("iproute2 'ip' is not installed")
    return found


def _tc() -> str:
    found = shutil.which("tc") or ("/usr/sbin/tc" if os.path.exists("/usr/sbin/tc") else None)
    if found is None:
        raise TestbedError("iproute2 'tc' is not installed")
    return found


def _run(command: Sequence[str]) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        raise TestbedError(f"{' '.join(command)}: {reason[0] if reason else done.returncode}")
    return done.stdout


def namespaces() -> list[str]:
    """Names of every network namespace ``ip netns`` knows."""
    out = _run([_ip(), "-json", "netns", "list"]).strip()
    return [entry["name"] for entry in json.loads(out)] if out else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale() -> list[str]:
    """Delete ``bs-<pid>-*`` namespaces whose pid no longer runs; returns what was deleted.

    Deleting a namespace destroys the veth end inside it, and with it the peer.
    """
    removed = []
    for name in namespaces():
        match = _STALE.match(name)
        if match and not _alive(int(match.group(1))):
            subprocess.run([_ip(), "netns", "del", name], capture_output=True, check=False)
            removed.append(name)
    return removed


def line_rate_bytes_per_second(megabits: int) -> int:
    return megabits * 1_000_000 // 8


@dataclass
class Testbed:
    """Context manager: the namespaces, the veth and the shaper; always torn down on exit.

    ``burst_bytes`` is tbf's bucket: small against a millisecond of line rate (125 kB at
    1 Gb/s) so the shaped rate holds at ms scale, and at least one jumbo frame so no
    frame is too big to ever pass. ``limit_bytes`` is tbf's queue; the sender's socket
    buffer is far smaller, so the socket blocks (backpressure, as on a NIC) before tbf
    would ever drop.
    """

    rate_megabits: int = 1000
    burst_bytes: int = 16 * 1024
    limit_bytes: int = 4 * 1024 * 1024
    tag: str = field(default_factory=lambda: str(os.getpid()))
    created: list[str] = field(default_factory=list, init=False)

    @property
    def sender(self) -> str:
        return f"{PREFIX}{self.tag}-tx"

    @property
    def receiver(self) -> str:
        return f"{PREFIX}{self.tag}-rx"

    @property
    def line_rate_bytes_per_second(self) -> int:
        return line_rate_bytes_per_second(self.rate_megabits)

    def exec_prefix(self, namespace: str | None = None) -> list[str]:
        """Argv prefix that runs a command inside a namespace (default: the sender's)."""
        return [_ip(), "netns", "exec", namespace or self.sender]

    def __enter__(self) -> Testbed:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.down()

    def up(self) -> None:
        ip, tc = _ip(), _tc()
        cleanup_stale()
        for name in (self.sender, self.receiver):
            _run([ip, "netns", "add", name])
            self.created.append(name)
        # Created directly inside the namespaces: the root namespace never sees the pair.
        _run(
            [
                *(ip, "link", "add", SENDER_INTERFACE, "netns", self.sender, "mtu", str(MTU)),
                *("type", "veth", "peer", "name", RECEIVER_INTERFACE, "netns", self.receiver),
                *("mtu", str(MTU)),
            ]
        )
        for namespace, interface, address in (
            (self.sender, SENDER_INTERFACE, SENDER_ADDRESS),
            (self.receiver, RECEIVER_INTERFACE, RECEIVER_ADDRESS),
        ):
            # No IPv6 link-local address: no DAD, MLD or router solicitations on the
            # counters being measured.
            _run([ip, "-n", namespace, "link", "set", interface, "addrgenmode", "none"])
            _run(
                [ip, "-n", namespace, "addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", interface]
            )
            _run([ip, "-n", namespace, "link", "set", interface, "up"])
            _run([ip, "-n", namespace, "link", "set", "lo", "up"])
        # Static neighbours: no ARP exchange in the middle of a measured burst.
        for namespace, interface, peer_ns, peer_if, peer_address in (
            (self.sender, SENDER_INTERFACE, self.receiver, RECEIVER_INTERFACE, RECEIVER_ADDRESS),
            (self.receiver, RECEIVER_INTERFACE, self.sender, SENDER_INTERFACE, SENDER_ADDRESS),
        ):
            mac = self.mac(peer_ns, peer_if)
            _run(
                [
                    *(ip, "-n", namespace, "neigh", "replace", peer_address, "lladdr", mac),
                    *("dev", interface, "nud", "permanent"),
                ]
            )
        _run(
            [
                *(tc, "-n", self.sender, "qdisc", "replace", "dev", SENDER_INTERFACE, "root"),
                *("tbf", "rate", f"{self.rate_megabits}mbit", "burst", str(self.burst_bytes)),
                *("limit", str(self.limit_bytes)),
            ]
        )

    def mac(self, namespace: str, interface: str) -> str:
        out = _run([_ip(), "-n", namespace, "-json", "link", "show", interface])
        return str(json.loads(out)[0]["address"])

    def qdisc_stats(self) -> dict[str, int]:
        """tbf's own counters on the sender: bytes, packets, drops, overlimits."""
        out = _run(
            [_tc(), "-n", self.sender, "-s", "-json", "qdisc", "show", "dev", SENDER_INTERFACE]
        )
        entry = json.loads(out)[0]
        return {k: int(entry.get(k, 0)) for k in ("bytes", "packets", "drops", "overlimits")}

    def down(self) -> None:
        for name in reversed(self.created):
            subprocess.run([_ip(), "netns", "del", name], capture_output=True, check=False)
        self.created.clear()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m burstscope.testing.testbed", description=__doc__
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("cleanup", help="delete bs-* namespaces of runs that are gone")
    up = sub.add_parser("up", help="create a testbed and hold it until interrupted")
    up.add_argument("--rate", type=int, default=1000, metavar="MBITS")
    args = parser.parse_args(argv)
    try:
        if args.action == "cleanup":
            for name in cleanup_stale():
                print(f"deleted {name}")
            return 0
        with Testbed(rate_megabits=args.rate) as bed:
            print(
                f"sender {bed.sender} ({SENDER_INTERFACE} {SENDER_ADDRESS}), "
                f"receiver {bed.receiver} ({RECEIVER_INTERFACE} {RECEIVER_ADDRESS}), "
                f"tbf {args.rate} Mb/s; Ctrl-C tears it down",
                flush=True,
            )
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return 0
    except TestbedError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
