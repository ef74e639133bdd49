"""Sampler benchmark: our sampler process against a minimal C loop, same files, same run.

Two configurations in one invocation:

- ``1ms``: 9 ports x 2 files = 18 netdev counter files (the machine's interfaces from
  ``/sys/class/net``, repeated in sorted order until there are 9; netdev counters stand in
  for RDMA ones), every 1 ms.
- ``100us``: 1 port x 2 files, every 100 us.

Ours is the real ``burstscope.collector.sampler.Sampler`` over a ``NetdevSource``. The
reference is a
C program embedded below, compiled with the system ``cc -O2`` into ``bench/.build/``. It
does what the sampler does and no more: ``clock_nanosleep(TIMER_ABSTIME)`` to absolute
deadlines, ``pread(fd, 32, 0)`` of both files of every port with a CLOCK_MONOTONIC read
before and after each port, the value parsed to an integer and stored with its midpoint
and read duration in a preallocated table, the same late/missed-tick rule as
``run_loop``. Both get the same scheduling: SCHED_FIFO priority 10 where permitted, pinned
to the same CPU (the one the sampler would pick by default), timer slack 1 ns. Each loop
runs for ``--duration`` seconds in two halves, in the order C, ours, ours, C, so a drift in
the (shared, noisy) machine's speed during the run weighs on both alike.

Figures, computed the same way for both (``numpy.percentile``, linear interpolation):

- ``lateness_*_us``: wake-up time minus deadline, per tick.
- ``read_window_p99_us``: per tick, first read's start to last read's end. Ours is
  derived from the ring: start = midpoint - read_ns // 2, end = start + read_ns (exact,
  since the midpoint is ``(before + after) >> 1``); the C loop records it directly.
- ``missed_tick_fraction``: deadlines skipped / (ticks run + deadlines skipped).
- CPU seconds: the process's run time between "running" and the end of the measured
  window, from ``/proc/PID/schedstat`` (nanoseconds) where the kernel has it, else
  ``/proc/PID/stat`` utime + stime (10 ms ticks); ``cpu_clock`` says which. Start-up
  (interpreter, numpy, compiling) is outside the window for both.
  ``cpu_ratio_vs_c`` = sampler-process CPU seconds / C CPU seconds.

``--json`` prints one JSON object per line: first the 1 ms / 18-file configuration (the
headline figures), then the 100 us / 2-file one, with the same fields; ``"configuration"``
names which. Lines rather than one nested object so each line stays a flat record and
``[json.loads(line) for line in out.splitlines()]`` reads them all. Without ``--json``, a
readable summary. Targets (on 2 cores):
``cpu_ratio_vs_c`` <= 1.5, ``missed_tick_fraction`` <= 0.001, ``read_window_p99_us`` <= 50.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# Run as a script: the repository root on sys.path, here and in the spawned sampler process.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from burstscope.collector.discovery import DEFAULT_SYSFS_ROOT  # noqa: E402
from burstscope.collector.ring import Field, Ring  # noqa: E402
from burstscope.collector.sampler import Sampler, SamplerConfig  # noqa: E402
from burstscope.collector.sources.base import STATUS_MISSING  # noqa: E402
from burstscope.collector.sources.netdev import NetdevSource  # noqa: E402
from burstscope.detectors.read_cost import tick_read_windows  # noqa: E402

BUILD = ROOT / "bench" / ".build"
REALTIME_PRIORITY = 10
TIMER_SLACK_NS = 1
READ_BYTES = 32

C_SOURCE = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/* argv: interval_ns cpu(-1: none) priority(0: none) timer_slack_ns max_ticks out file... */

static volatile sig_atomic_t stop;
static void on_term(int signum) { (void)signum; stop = 1; }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *table(size_t count, size_t size) {
    void *memory = calloc(count, size);
    if (memory == NULL) { perror("calloc"); exit(1); }
    memset(memory, 0xff, count * size);  /* fault the pages in before the loop */
    return memory;
}

int main(int argc, char **argv) {
    if (argc < 9 || (argc - 7) % 2) {
        fprintf(stderr, "usage: interval cpu prio slack max_ticks out xmit rcv...\n");
        return 2;
    }
    int64_t interval = atoll(argv[1]);
    int cpu = atoi(argv[2]), priority = atoi(argv[3]);
    unsigned long slack = strtoul(argv[4], NULL, 10);
    int64_t max_ticks = atoll(argv[5]);
    const char *out = argv[6];
    int ports = (argc - 7) / 2;

    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_term;
    sigaction(SIGTERM, &action, NULL);

    int slack_ok = slack && prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0) == 0;
    int pinned = -1;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) == 0) pinned = cpu;
    }
    int realtime = 0;
    if (priority > 0) {
        struct sched_param param = {.sched_priority = priority};
        realtime = sched_setscheduler(0, SCHED_FIFO, &param) == 0;
    }

    int *xmit_fd = table(ports, sizeof(int)), *rcv_fd = table(ports, sizeof(int));
    for (int p = 0; p < ports; p++) {
        xmit_fd[p] = open(argv[7 + 2 * p], O_RDONLY | O_CLOEXEC);
        rcv_fd[p] = open(argv[8 + 2 * p], O_RDONLY | O_CLOEXEC);
        if (xmit_fd[p] < 0 || rcv_fd[p] < 0) { perror(argv[7 + 2 * p]); return 1; }
    }
    /* The same table the sampler's ring keeps: per tick and port. */
    int64_t *midpoint = table(max_ticks * ports, 8), *read_ns = table(max_ticks * ports, 8);
    uint64_t *xmit = table(max_ticks * ports, 8), *rcv = table(max_ticks * ports, 8);
    int64_t *lateness = table(max_ticks, 8), *window = table(max_ticks, 8);
    int64_t ticks = 0, missed = 0, read_errors = 0;
    char buffer[64];

    printf("running %d %d %d\n", realtime, pinned, slack_ok);
    fflush(stdout);

    int64_t deadline = now_ns() + interval;
    while (!stop && ticks < max_ticks) {
        struct timespec at = {deadline / 1000000000LL, deadline % 1000000000LL};
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) continue;
        int64_t woke = now_ns();
        int64_t first = 0, last = 0;
        for (int p = 0; p < ports; p++) {
            size_t cell = (size_t)ticks * ports + p;
            int64_t before = now_ns();
            ssize_t n = pread(xmit_fd[p], buffer, READ_BYTES, 0);
            if (n > 0) { buffer[n] = 0; xmit[cell] = strtoull(buffer, NULL, 10); }
            else read_errors++;
            n = pread(rcv_fd[p], buffer, READ_BYTES, 0);
            if (n > 0) { buffer[n] = 0; rcv[cell] = strtoull(buffer, NULL, 10); }
            else read_errors++;
            int64_t after = now_ns();
            midpoint[cell] = (before + after) >> 1;
            read_ns[cell] = after - before;
            if (p == 0) first = before;
            last = after;
        }
        lateness[ticks] = woke - deadline;
        window[ticks] = last - first;
        ticks++;
        deadline += interval;
        int64_t earliest = now_ns() + interval / 2;  /* the sampler's rule: never closer */
        if (deadline < earliest) {
            int64_t skipped = (earliest - deadline + interval - 1) / interval;
            missed += skipped;
            deadline += skipped * interval;
        }
    }

    FILE *file = fopen(out, "wb");
    if (file == NULL) { perror(out); return 1; }
    int64_t counts[3] = {ticks, missed, read_errors};
    fwrite(counts, 8, 3, file);
    fwrite(lateness, 8, ticks, file);
    fwrite(window, 8, ticks, file);
    return fclose(file) == 0 ? 0 : 1;
}
""".replace("READ_BYTES", str(READ_BYTES))


@dataclass(frozen=True, slots=True)
class Configuration:
    name: str
    interval_ns: int
    interfaces: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One loop's run: per-tick arrays and the counts around them."""

    lateness_ns: npt.NDArray[np.int64]
    read_window_ns: npt.NDArray[np.int64]
    ticks: int
    missed: int
    cpu_seconds: float
    realtime: bool
    cpu: int

    @property
    def missed_fraction(self) -> float:
        return self.missed / max(1, self.ticks + self.missed)

    def __add__(self, other: Measurement) -> Measurement:
        return Measurement(
            lateness_ns=np.concatenate([self.lateness_ns, other.lateness_ns]),
            read_window_ns=np.concatenate([self.read_window_ns, other.read_window_ns]),
            ticks=self.ticks + other.ticks,
            missed=self.missed + other.missed,
            cpu_seconds=self.cpu_seconds + other.cpu_seconds,
            realtime=self.realtime and other.realtime,
            cpu=self.cpu if self.cpu == other.cpu else -1,
        )


class CpuClock:
    """A process's CPU time: schedstat (ns) where the kernel exposes it, else stat ticks."""

    def __init__(self) -> None:
        self.name = "schedstat" if self._schedstat(os.getpid()) is not None else "stat"

    @staticmethod
    def _schedstat(pid: int) -> int | None:
        try:
            return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def seconds(self, pid: int) -> float:
        if self.name == "schedstat":
            nanoseconds = self._schedstat(pid)
            if nanoseconds is None:
                raise RuntimeError(f"process {pid} has no /proc/{pid}/schedstat")
            return nanoseconds / 1e9
        # comm may hold spaces and parentheses: the fields start after the last ")".
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile_us(values_ns: npt.NDArray[np.int64], q: float) -> float:
    if values_ns.size == 0:
        return float("nan")
    return round(float(np.percentile(values_ns, q)) / 1e3, 2)


def default_cpu() -> int:
    """The CPU the sampler pins itself to by default (collector.sampler._tune)."""
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-1] if len(allowed) > 1 else -1


def machine_interfaces(ports: int, sysfs_root: str = DEFAULT_SYSFS_ROOT) -> tuple[str, ...]:
    names = sorted(
        entry.name
        for entry in Path(sysfs_root, "class", "net").iterdir()
        if (entry / "statistics" / "tx_bytes").is_file()
    )
    if not names:
        raise SystemExit(f"no interface with statistics under {sysfs_root}/class/net")
    return tuple(itertools.islice(itertools.cycle(names), ports))


def counter_files(interfaces: tuple[str, ...], sysfs_root: str = DEFAULT_SYSFS_ROOT) -> list[str]:
    files = []
    for interface in interfaces:
        statistics = Path(sysfs_root, "class", "net", interface, "statistics")
        files += [str(statistics / "tx_bytes"), str(statistics / "rx_bytes")]
    return files


def build_reference() -> Path:
    """Compile the C loop once per source text; the binary name carries its hash."""
    compiler = shutil.which("cc")
    if compiler is None:
        raise SystemExit("no C compiler: the benchmark needs `cc` for its C reference loop")
    digest = hashlib.sha256(C_SOURCE.encode()).hexdigest()[:12]
    binary = BUILD / f"sampler_reference_{digest}"
    if not binary.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        source = BUILD / f"sampler_reference_{digest}.c"
        source.write_text(C_SOURCE)
        partial = binary.with_suffix(".partial")
        subprocess.run(
            [compiler, "-O2", "-Wall", "-o", str(partial), str(source)],
            check=True,
        )
        partial.replace(binary)
    return binary


def run_reference(
    binary: Path,
    config: Configuration,
    cpu: int,
    duration: float,
    clock: CpuClock,
    files: list[str] | None = None,
) -> Measurement:
    """The C loop over ``files`` (default: the configuration's netdev counter files)."""
    max_ticks = int(duration * 1e9 / config.interval_ns * 1.5) + 1000
    with tempfile.TemporaryDirectory(prefix="burstscope-bench-") as scratch:
        out = Path(scratch) / "reference.bin"
        command = [
            str(binary),
            str(config.interval_ns),
            str(cpu),
            str(REALTIME_PRIORITY),
            str(TIMER_SLACK_NS),
            str(max_ticks),
            str(out),
            *(files if files is not None else counter_files(config.interfaces)),
        ]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
            assert process.stdout is not None
            words = process.stdout.readline().split()
            if not words or words[0] != "running":
                process.kill()
                raise RuntimeError(f"C reference did not start: {words}")
            start = clock.seconds(process.pid)
            time.sleep(duration)
            cpu_seconds = clock.seconds(process.pid) - start
            process.send_signal(signal.SIGTERM)
            if process.wait(timeout=10) != 0:
                raise RuntimeError(f"C reference exited with status {process.returncode}")
        data = np.fromfile(out, dtype=np.int64)
    ticks, missed, read_errors = (int(value) for value in data[:3])
    if read_errors:
        raise RuntimeError(f"C reference had {read_errors} failed reads")
    return Measurement(
        lateness_ns=data[3 : 3 + ticks],
        read_window_ns=data[3 + ticks : 3 + 2 * ticks],
        ticks=ticks,
        missed=missed,
        cpu_seconds=cpu_seconds,
        realtime=words[1] == "1",
        cpu=int(words[2]),
    )


def run_sampler(config: Configuration, cpu: int, duration: float, clock: CpuClock) -> Measurement:
    source = NetdevSource(config.interfaces)
    sampler_config = SamplerConfig(
        interval_ns=config.interval_ns,
        realtime_priority=REALTIME_PRIORITY,
        cpu=cpu,
        timer_slack_ns=TIMER_SLACK_NS,
    )
    lateness: list[npt.NDArray[np.int64]] = []
    failed: list[int] = []
    windows: list[npt.NDArray[np.int64]] = []
    cursor = 0

    def drain(ring: Ring) -> None:
        nonlocal cursor
        cursor, rows = ring.read_since(cursor)
        if rows.lost_rows:
            raise RuntimeError(f"benchmark fell behind the ring: {rows.lost_rows} rows lost")
        lateness.append(rows.lateness_ns.astype(np.int64))
        failed.append(int(np.count_nonzero(rows.status == STATUS_MISSING)))
        windows.append(
            tick_read_windows(rows.timestamp_ns, rows.read_ns, rows.status != STATUS_MISSING)
        )

    with Sampler(source, sampler_config) as ring:
        pid = ring.get(Field.PID)
        start = clock.seconds(pid)
        ends = time.monotonic() + duration
        while (left := ends - time.monotonic()) > 0:
            time.sleep(min(1.0, left))
            drain(ring)
        cpu_seconds = clock.seconds(pid) - start
        ticks, missed = ring.get(Field.TICKS), ring.get(Field.MISSED_TICKS)
        realtime, pinned = bool(ring.get(Field.REALTIME)), ring.get(Field.CPU)
        drain(ring)
        errors = sum(failed)
    if errors:
        raise RuntimeError(f"sampler had {errors} failed reads")
    return Measurement(
        lateness_ns=np.concatenate(lateness),
        read_window_ns=np.concatenate(windows),
        ticks=ticks,
        missed=missed,
        cpu_seconds=cpu_seconds,
        realtime=realtime,
        cpu=pinned,
    )


def record(
    config: Configuration,
    ours: Measurement,
    reference: Measurement,
    duration: float,
    clock: CpuClock,
) -> dict[str, Any]:
    return {
        "configuration": config.name,
        "cpu_ratio_vs_c": round(ours.cpu_seconds / reference.cpu_seconds, 3)
        if reference.cpu_seconds > 0
        else None,
        "missed_tick_fraction": round(ours.missed_fraction, 6),
        "lateness_p50_us": percentile_us(ours.lateness_ns, 50),
        "lateness_p99_us": percentile_us(ours.lateness_ns, 99),
        "read_window_p99_us": percentile_us(ours.read_window_ns, 99),
        "samples": int(ours.lateness_ns.size),
        "cpu_seconds": round(ours.cpu_seconds, 4),
        "c_cpu_seconds": round(reference.cpu_seconds, 4),
        "c_missed_tick_fraction": round(reference.missed_fraction, 6),
        "c_lateness_p50_us": percentile_us(reference.lateness_ns, 50),
        "c_lateness_p99_us": percentile_us(reference.lateness_ns, 99),
        "c_read_window_p99_us": percentile_us(reference.read_window_ns, 99),
        "c_samples": reference.ticks,
        "interval_us": config.interval_ns / 1e3,
        "ports": len(config.interfaces),
        "files": 2 * len(config.interfaces),
        "interfaces": list(config.interfaces),
        "duration_s": duration,
        "realtime": ours.realtime,
        "c_realtime": reference.realtime,
        "cpu": ours.cpu,
        "c_cpu": reference.cpu,
        "cpu_clock": clock.name,
    }


def summary(result: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"{result['configuration']}: {result['files']} files every "
            f"{result['interval_us']:g} us for {result['duration_s']:g} s "
            f"(realtime={result['realtime']}, cpu={result['cpu']}, cpu clock "
            f"{result['cpu_clock']})",
            f"  {'':22}{'sampler':>12}{'C loop':>12}",
            f"  {'CPU seconds':22}{result['cpu_seconds']:>12}{result['c_cpu_seconds']:>12}"
            f"   ratio {result['cpu_ratio_vs_c']} (target <= 1.5)",
            f"  {'missed tick fraction':22}{result['missed_tick_fraction']:>12}"
            f"{result['c_missed_tick_fraction']:>12}   (target <= 0.001)",
            f"  {'lateness p50 us':22}{result['lateness_p50_us']:>12}"
            f"{result['c_lateness_p50_us']:>12}",
            f"  {'lateness p99 us':22}{result['lateness_p99_us']:>12}"
            f"{result['c_lateness_p99_us']:>12}",
            f"  {'read window p99 us':22}{result['read_window_p99_us']:>12}"
            f"{result['c_read_window_p99_us']:>12}   (target <= 50)",
            f"  {'samples':22}{result['samples']:>12}{result['c_samples']:>12}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds per loop, each (default 10)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line per configuration")
    args = parser.parse_args(argv)
    if args.duration <= 0:
        parser.error("--duration must be positive")
    binary = build_reference()
    cpu = default_cpu()
    clock = CpuClock()
    configurations = (
        Configuration("1ms", 1_000_000, machine_interfaces(9)),
        Configuration("100us", 100_000, machine_interfaces(1)),
    )
    half = args.duration / 2
    for config in configurations:
        reference = run_reference(binary, config, cpu, half, clock)
        ours = run_sampler(config, cpu, half, clock)
        ours += run_sampler(config, cpu, half, clock)
        reference += run_reference(binary, config, cpu, half, clock)
        result = record(config, ours, reference, args.duration, clock)
        print(json.dumps(result) if args.json else summary(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
