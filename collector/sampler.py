"""The sampler process: a fixed cadence to absolute deadlines, honest timestamps, one ring.

It runs in a process of its own because the GIL switch interval is 5 ms: an HTTP thread
serving a scrape in the same interpreter could stall a 1 ms loop. Nothing else runs here.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import multiprocessing
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

from burstscope.collector.ring import Field, Ring, SamplerState, capacity_for
from burstscope.collector.sources.base import CounterSource, SampleRow

MIN_INTERVAL_NS = 100_000
MAX_INTERVAL_NS = 60_000_000_000
_PR_SET_PDEATHSIG = 1
_PR_SET_TIMERSLACK = 29
_SWITCH_INTERVAL_S = 0.0001
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*$")


def parse_interval(text: str) -> int:
    """Nanoseconds from "1ms", "100us", "0.5s" or a bare number of seconds; range-checked."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"interval {text!r} is not a duration like 1ms, 100us or 0.5s")
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    nanoseconds = round(value)
    if not MIN_INTERVAL_NS <= nanoseconds <= MAX_INTERVAL_NS:
        raise ValueError(f"interval {text!r} is outside the supported range 100us to 60s")
    return nanoseconds


def set_process_title(title: str) -> None:
    """The name ps, top and /proc/PID/cmdline show (setproctitle rewrites argv in place)."""
    try:
        from setproctitle import setproctitle
    except ImportError:  # a name is a convenience: never a reason not to sample
        return
    setproctitle(title)


@dataclass(frozen=True, slots=True)
class SamplerConfig:
    interval_ns: int = 1_000_000
    # SCHED_FIFO priority to ask for (needs CAP_SYS_NICE or RLIMIT_RTPRIO); None: don't.
    realtime_priority: int | None = 10
    # CPU to pin to; None picks the last allowed CPU when there are several, -1 disables.
    cpu: int | None = None
    # Timer slack defaults to 50 us and would show as lateness (PR_SET_TIMERSLACK(2const)).
    timer_slack_ns: int = 1
    # Busy-wait this long before each deadline instead of sleeping: trades CPU for jitter.
    spin_ns: int = 0
    ring_seconds: float = 64.0


class SamplerError(Exception):
    """The sampler process could not start or died."""


def _prctl(option: int, value: int) -> bool:
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    return int(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)) == 0


def _tune(config: SamplerConfig, ring: Ring) -> None:
    """Best effort: every knob is used when permitted and recorded, never required."""
    if config.timer_slack_ns and _prctl(_PR_SET_TIMERSLACK, config.timer_slack_ns):
        ring.set(Field.TIMER_SLACK_NS, config.timer_slack_ns)
    cpu = config.cpu
    if cpu is None:
        allowed = sorted(os.sched_getaffinity(0))
        cpu = allowed[-1] if len(allowed) > 1 else -1
    if cpu >= 0:
        try:
            os.sched_setaffinity(0, {cpu})
            ring.set(Field.CPU, cpu)
        except OSError as exc:
            ring.set(Field.CPU_ERRNO, exc.errno or errno.EINVAL)
    if config.realtime_priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(config.realtime_priority))
            ring.set(Field.REALTIME, 1)
        except OSError as exc:
            ring.set(Field.REALTIME_ERRNO, exc.errno or errno.EPERM)


_CAP_SYS_NICE = 23  # include/uapi/linux/capability.h


def has_capability(bit: int, status: str | None = None) -> bool:
    """Whether this process's effective set holds capability ``bit`` (/proc/self/status)."""
    try:
        text = Path("/proc/self/status").read_text() if status is None else status
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def cgroup_rt_runtime(
    cgroup: str | None = None, root: Path = Path("/sys/fs/cgroup")
) -> tuple[Path, int] | None:
    """This process's cgroup v1 cpu controller's real-time budget (cpu.rt_runtime_us).

    None where there is none to read: cgroup v2, or a kernel without RT_GROUP_SCHED.
    """
    try:
        text = Path("/proc/self/cgroup").read_text() if cgroup is None else cgroup
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            # The host's view names the group; a container's (no cgroup namespace under v1)
            # names the host's path but mounts its own group at the controller's root.
            for budget in (
                root / "cpu" / path.lstrip("/") / "cpu.rt_runtime_us",
                root / "cpu" / "cpu.rt_runtime_us",
            ):
                try:
                    return budget, int(budget.read_text())
                except (OSError, ValueError):
                    continue
    return None


def realtime_refusal_reason(status: str | None = None, cgroup: str | None = None) -> str:
    """Why SCHED_FIFO was refused with EPERM, for the log: the capability, or the cgroup's
    real-time budget when the capability is there (a container under cgroup v1 with real-time
    group scheduling: __sched_setscheduler, kernel/sched/syscalls.c, refuses a task whose
    group has no runtime)."""
    if has_capability(_CAP_SYS_NICE, status):
        budget = cgroup_rt_runtime(cgroup)
        where = f" ({budget[0]} is {budget[1]})" if budget is not None else ""
        return (
            ": the process has CAP_SYS_NICE, so its cgroup is what refuses: under cgroup v1 "
            f"with real-time group scheduling its cpu.rt_runtime_us must be above 0{where} "
            "(a container runtime's --cpu-rt-runtime, after the parent cgroup's; "
            "deploy/container/README.md)"
        )
    return (
        ": it needs CAP_SYS_NICE or an RLIMIT_RTPRIO at or above that priority (under "
        "systemd: the timing drop-in, systemd/README.md)"
    )


def tuning_notes(ring: Ring, config: SamplerConfig) -> list[str]:
    """What the sampler asked for and did not get, and why, for one log line each."""
    notes = []
    refused = ring.get(Field.REALTIME_ERRNO)
    if refused:
        why = ""
        if refused == errno.EPERM:
            why = realtime_refusal_reason()
        notes.append(
            f"SCHED_FIFO priority {config.realtime_priority} refused ({os.strerror(refused)})"
            f"{why}; sampling goes on under normal scheduling, with a longer lateness tail"
        )
    refused = ring.get(Field.CPU_ERRNO)
    if refused:
        wanted = "the last allowed CPU" if config.cpu is None else f"CPU {config.cpu}"
        notes.append(f"pinning the sampler to {wanted} refused ({os.strerror(refused)})")
    return notes


def tick_description(ring: Ring) -> str:
    """Which tick the sampler process runs, for one log line at start."""
    if ring.get(Field.COMPILED_TICK):
        return "ticking in the compiled core (collector/sources/_tick.c)"
    return "ticking in Python (no compiled core for this source, or not built)"


def _wall_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC from the tightest of a few bracketed reads."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        before = time.monotonic_ns()
        wall = time.time_ns()
        after = time.monotonic_ns()
        if best is None or after - before < best[0]:
            best = (after - before, wall - (before + after) // 2)
    assert best is not None
    return best[1]


# Why the compiled loop handed control back (collector/sources/_tick.c, run_ticks).
_LOOP_STOPPED, _LOOP_PENDING, _LOOP_ORPHANED = 0, 1, 2
LoopResult = tuple[int, int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class Ticking:
    """How the sampler ticks with a source: ``tick(lateness)`` reads and writes one tick;
    with the compiled core, ``loop`` runs whole ticks in C and ``finish(offset, lateness)``
    completes a tick it handed back."""

    tick: Callable[[int], None]
    loop: Callable[[int, int, int, int], LoopResult] | None = None
    finish: Callable[[int, int], None] | None = None

    @property
    def compiled(self) -> bool:
        return self.loop is not None


def ticking_for(source: CounterSource, ring: Ring, interval_ns: int, spin_ns: int = 0) -> Ticking:
    """The compiled tick when the source offers one (file sources built with
    collector.sources._tick), else read_into a SampleRow that the ring packs."""
    record_reader = getattr(source, "record_reader", None)  # optional: file sources only
    reader = record_reader(ring.buffer, ring.layout) if record_reader else None
    if reader is None:
        row = SampleRow.for_ports(len(source.ports))
        read_into = source.read_into
        write = ring.write

        def tick(lateness_ns: int) -> None:
            read_into(row)
            write(row, lateness_ns)

        return Ticking(tick)
    next_record, commit = ring.next_record, ring.commit
    header = (
        int(Field.HEAD),
        int(Field.TICKS),
        int(Field.MISSED_TICKS),
        int(Field.STOP_REQUESTED),
        int(Field.HEARTBEAT_NS),
    )
    records, capacity, record_bytes = ring.records_offset, ring.capacity, ring.record_bytes

    def tick_in_place(lateness_ns: int) -> None:
        offset = next_record()
        reader(offset)
        commit(offset, lateness_ns)

    def loop(deadline: int, ticks: int, missed: int, parent: int) -> LoopResult:
        return reader.run(  # type: ignore[no-any-return]
            records,
            capacity,
            record_bytes,
            header,
            interval_ns,
            spin_ns,
            deadline,
            ticks,
            missed,
            parent,
        )

    def finish(offset: int, lateness_ns: int) -> None:
        reader.finish(offset)
        commit(offset, lateness_ns)

    return Ticking(tick_in_place, loop, finish)


def run_loop(
    source: CounterSource,
    ring: Ring,
    interval_ns: int,
    spin_ns: int = 0,
    ticking: Ticking | None = None,
) -> None:
    """Tick until asked to stop, on absolute deadlines.

    A late tick runs at once; the deadlines that would follow it closer than half an
    interval are skipped and counted as missed. Without that, a tick woken 1.4 ms late at
    1 ms would be followed 10 us later by the next, and a 10 us window holds one packet
    or none: a "burst" at 300% of line rate, or a silence, made by the scheduler.

    With the compiled core this loop runs in C (run_ticks: the same rules, tick for tick)
    for as long as every port reads cleanly; a tick with a port to retry, reopen or refuse
    comes back here, is finished by the Python rules, and C carries on.
    """
    header = ring.header
    clock = time.monotonic_ns
    sleep = time.sleep
    if ticking is None:
        ticking = ticking_for(source, ring, interval_ns, spin_ns)
    tick, loop, finish = ticking.tick, ticking.loop, ticking.finish
    header[int(Field.COMPILED_TICK)] = int(ticking.compiled)
    # Plain ints: numpy indexes with an int about three times faster than with an IntEnum.
    stop, ticks_field, heartbeat, missed_field = (
        int(Field.STOP_REQUESTED),
        int(Field.TICKS),
        int(Field.HEARTBEAT_NS),
        int(Field.MISSED_TICKS),
    )
    parent = os.getppid()
    ticks = 0
    missed = 0
    deadline = clock() + interval_ns
    half_interval = interval_ns // 2
    while not header[stop]:
        if loop is not None and finish is not None:
            reason, deadline, ticks, missed, woke, offset = loop(deadline, ticks, missed, parent)
            if reason != _LOOP_PENDING:
                break  # stopped, or orphaned (the check below, made in C)
            finish(offset, woke - deadline)
        else:
            wait = deadline - clock() - spin_ns
            if wait > 0:
                sleep(wait / 1e9)
            if spin_ns:
                while clock() < deadline:
                    pass
            woke = clock()
            tick(woke - deadline)
        ticks += 1
        header[ticks_field] = ticks
        header[heartbeat] = woke
        deadline += interval_ns
        # From the end of this tick's reads: a tick preempted mid-read must not be followed
        # at once either. Sample times (read midpoints) are then half an interval apart.
        earliest = clock() + half_interval
        if deadline < earliest:
            skipped = (earliest - deadline + interval_ns - 1) // interval_ns
            missed += skipped
            deadline += skipped * interval_ns
            header[missed_field] = missed
        if ticks & 1023 == 0 and os.getppid() != parent:
            break  # the consumer died without stopping us


def _sampler_main(
    source: CounterSource, ring_name: str, config: SamplerConfig, channel: Connection
) -> None:
    # ps and top show this instead of "python -c from multiprocessing.spawn import ...".
    set_process_title("burstscope: sampler")
    ring = Ring.attach(ring_name)

    def request_stop(signum: int, frame: FrameType | None) -> None:
        ring.set(Field.STOP_REQUESTED, 1)

    # The parent decides when sampling ends (Ctrl-C reaches the whole process group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, request_stop)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        ring.set(Field.PID, os.getpid())
        ring.set(Field.INTERVAL_NS, config.interval_ns)
        _tune(config, ring)
        # A source may run a helper thread here (the simulated node generates its traffic
        # ahead). The tick waits for the GIL at most this long, not CPython's default 5 ms.
        sys.setswitchinterval(_SWITCH_INTERVAL_S)
        source.open()
        # Chosen before "running", so the parent can say which tick runs.
        ticking = ticking_for(source, ring, config.interval_ns, config.spin_ns)
        ring.set(Field.COMPILED_TICK, int(ticking.compiled))
        ring.prefault()
        ring.set(Field.WALL_OFFSET_NS, _wall_offset_ns())
        ring.set(Field.STATE, SamplerState.RUNNING)
        channel.send(("running", ""))
        run_loop(source, ring, config.interval_ns, config.spin_ns, ticking)
        ring.set(Field.STATE, SamplerState.STOPPED)
    except Exception as exc:
        ring.set(Field.STATE, SamplerState.FAILED)
        with contextlib.suppress(OSError):
            channel.send(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        source.close()
        channel.close()
        ring.close()


class Sampler:
    """Starts the sampler process over a new ring and stops it; a context manager."""

    def __init__(self, source: CounterSource, config: SamplerConfig | None = None) -> None:
        self.source = source
        self.config = config or SamplerConfig()
        self._ring: Ring | None = None
        self._process: Any = None
        self._receiver: Connection | None = None

    @property
    def ring(self) -> Ring:
        assert self._ring is not None, "start() first"
        return self._ring

    def start(self, timeout: float = 30.0) -> Ring:
        # The shared memory exists only while started, so a failed start leaks nothing.
        self._ring = Ring.create(
            len(self.source.ports), capacity_for(self.config.interval_ns, self.config.ring_seconds)
        )
        # spawn, not fork: the consumer may already run threads (HTTP, MQTT) when it starts us.
        context = multiprocessing.get_context("spawn")
        receiver, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_sampler_main,
            args=(self.source, self.ring.name, self.config, sender),
            name="burstscope-sampler",
            daemon=True,
        )
        self._process.start()
        sender.close()
        if not receiver.poll(timeout):
            self.stop()
            raise SamplerError(f"sampler did not start within {timeout:g} s")
        try:
            state, message = receiver.recv()
        except EOFError:
            state, message = "failed", f"sampler exited with status {self._process.exitcode}"
        if state != "running":
            receiver.close()
            self.stop()
            raise SamplerError(message)
        # Kept open: a sampler that fails later says why here (see failure()).
        self._receiver = receiver
        return self.ring

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def failure(self) -> str:
        """Why a started sampler is no longer running, for one log line."""
        message = None
        receiver = self._receiver
        if receiver is not None:
            with contextlib.suppress(OSError, EOFError):
                if receiver.poll(0):
                    _state, message = receiver.recv()
        if message:
            return str(message)
        code = None if self._process is None else self._process.exitcode
        if code is None:
            return "it is still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def kill(self) -> None:
        """SIGKILL the sampler process (it stalled); the ring stays for a last read."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5)

    @property
    def alive(self) -> bool:
        return self._process is not None and bool(self._process.is_alive())

    def stop(self, timeout: float = 2.0) -> None:
        if self._ring is not None:
            self._ring.set(Field.STOP_REQUESTED, 1)
        if self._process is None:
            return
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout)
        self._process = None
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    def close(self) -> None:
        self.stop()
        if self._ring is not None:
            self._ring.close()
            self._ring = None

    def __enter__(self) -> Ring:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
