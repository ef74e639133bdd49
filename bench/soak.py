"""Soak: the agent for an hour under scrapes, storms, reloads and broker restarts; its trend.

``python bench/soak.py --json`` prints ONE JSON line (a readable summary goes to stderr). In
one run, on this machine:

1. ``burstscope simulate --sysfs DIR`` writes the emulated 9-port tree (18 data counter
   files every millisecond) for the whole run, as in ``bench/agent.py``.
2. Mosquitto (Debian's) on a fixed loopback port with persistence saved on every change, so
   a persistent session outlives a SIGKILL, and no cap on the messages it queues for a
   client that is away (``max_queued_messages 0``, mosquitto.conf(5):
   https://mosquitto.org/man/mosquitto-conf-5.html); ``burstscope events --json --session``
   subscribed to it, whose lines give every message's ``seq`` (docs/mqtt.md: one sequence per
   agent run, +1 per message).
3. The real ``burstscope agent`` at 1 ms on the tree, from a configuration file with
   ``[mqtt]`` and ``[recording]`` (retention by ``max_bytes`` and ``max_age``), for
   ``--duration`` seconds (default 1 h). Meanwhile: a scrape every ``--scrape-every`` s
   (1), ``--storm-size`` (100) concurrent scrapes every ``--storm-every`` s (120), SIGHUP
   every ``--hup-every`` s (60, alternating ``thresholds.busy`` so each reload applies a
   change), the broker SIGKILLed every ``--broker-restart-every`` s (300) and restarted
   ``--broker-down`` s (10) later. Every scrape must be HTTP 200 and parse
   (prometheus_client's text parser).
4. Every ``--sample-every`` s (10) the agent's whole process tree (the agent and every
   descendant: the sampler process, multiprocessing's resource tracker) is read: PSS from
   ``/proc/PID/smaps_rollup``, open fds from ``/proc/PID/fd``, threads from
   ``/proc/PID/status``, each summed over the tree. A sample due during a storm waits for
   the storm's end, so its 100 connections and their threads are not counted as a trend.
5. The C reference loop of ``bench/sampler.py`` reads the same 18 files at 1 kHz
   concurrently for the whole run, in back-to-back windows of ``--c-window`` s (its
   per-tick tables are preallocated: an hour in one run would take 1.5 GB), pinned to the
   CPU and at the SCHED_FIFO priority the sampler takes. Why concurrently rather than in
   interleaved windows: the misses of a 1 ms loop come from stalls of milliseconds (VM
   steal time, a busy core) that come and go within seconds, so only a loop running at the
   same moments meets the same stalls. The cost of running both at once is that each may
   wait for the other's tick on their shared CPU: tens of microseconds (the read window's
   p99 in docs/performance.md), against the half interval (500 us) by which a wake-up must
   be late before a deadline is skipped, so neither's missed ticks are raised by the other.

Figures are taken after ``--warmup`` s (default 600: each periodic event has happened at
least twice by then, and the recording has reached its retention bound). The trend of each
tree figure is the least-squares line (``numpy.polyfit``, degree 1) through the samples
after the warm-up, as a slope per hour, with min, max and the swing (max - min).

Targets, each with its verdict under ``targets``: PSS slope <= 2 MB/hour; fds and threads
flat (the fitted line rises by less than one over the fitted window); no scrape error; no
restart (``burstscope_restarts_total`` stays 0, the agent never exits); the agent's missed
tick fraction <= the C loop's (same windows) + 0.001; MQTT sequence numbers lost (gaps up
to the last ``seq``, from the offline status) <= ``burstscope_mqtt_dropped_messages_total``.

On any failure (a process that does not start, the agent exiting, an interrupt) the JSON
line still comes, with what was measured, ``error`` naming the failure, and exit status 1.
Exit status 1 also when a target is missed; 0 when every target is met; 2 for bad flags.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.agent import (  # noqa: E402
    INTERVAL_NS,
    burstscope_command,
    counter_files,
    descendants,
    free_port,
    loadavg,
    memory_kb,
    wait_for_tree,
)
from bench.sampler import (  # noqa: E402
    Configuration,
    CpuClock,
    build_reference,
    default_cpu,
    run_reference,
)
from burstscope.testing.processes import find_mosquitto  # noqa: E402

TARGETS = {
    "pss_slope_mb_per_hour": 2.0,
    "missed_ticks_over_c": 0.001,
}
BUSY_THRESHOLDS = (0.25, 0.3)  # thresholds.busy alternates: every SIGHUP applies a change
STORM_BREAK_SECONDS = 30.0  # the storm's scrapes each get this long to answer


class SoakFailed(Exception):
    """The run could not go on; what was measured so far is still reported."""


@dataclass
class Broker:
    """mosquitto on a fixed loopback port, so the agent and the subscriber find it again."""

    binary: str
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        config = self.directory / "mosquitto.conf"
        config.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
            f"persistence true\npersistence_location {self.directory}/\n"
            # Saved every second, so the subscriber's session and what is queued for it outlive
            # a SIGKILL. Not on every change (autosave_on_changes): a save per message held
            # the broker below the agent's ~270 messages/s and the spool never emptied. No
            # cap on the queue of a client that is away (the default 1000 would drop messages
            # the agent did deliver, and count them as the agent's loss).
            "autosave_interval 1\nmax_queued_messages 0\n"
            # Its log only for what goes wrong: every save is a line, 60 MB an hour.
            "log_type error\nlog_type warning\n" + ("user root\n" if os.geteuid() == 0 else "")
        )
        log = (self.directory / "mosquitto.log").open("ab")
        self.process = subprocess.Popen([self.binary, "-c", str(config)], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.05)
        raise SoakFailed(f"mosquitto did not listen on port {self.port}")

    def kill(self, signum: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Subscriber:
    """``burstscope events --json --session`` in a subprocess: the seqs and statuses it sees."""

    def __init__(self, url: str, session: str, log: Path) -> None:
        self.seqs: set[int] = set()
        self.runs: set[int] = set()
        self.messages = 0
        self.last_seq: int | None = None
        self.offline = threading.Event()
        self.subscribed = threading.Event()
        self._log = log.open("w")
        self.process = subprocess.Popen(
            [*burstscope_command(), "events", "--mqtt", url, "--json", "--session", session],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if "gap" in message:
                    continue  # the subscriber's own gap report; gaps are counted here
                if isinstance(message.get("seq"), int):
                    self.seqs.add(message["seq"])
                    self.runs.add(message.get("run", 0))
                    self.messages += 1
                elif message.get("online") is False and isinstance(message.get("last_seq"), int):
                    self.last_seq = message["last_seq"]
                    self.offline.set()

    def _watch(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._log.write(line)
            self._log.flush()
            if "subscribed" in line:
                self.subscribed.set()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def lost(self) -> dict[str, Any]:
        """Sequence numbers missing up to the last one the agent published."""
        seqs = set(self.seqs)
        last = self.last_seq if self.last_seq is not None else max(seqs, default=0)
        received = sum(1 for seq in seqs if seq <= last)
        return {
            "messages_received": self.messages,
            "distinct_seq": len(seqs),
            "last_seq": last,
            "last_seq_from": "offline status" if self.last_seq is not None else "highest seen",
            "lost": last - received,
            "runs": len(self.runs),
        }


def parse_exposition(body: str) -> dict[str, float]:
    """Every sample of a text exposition summed over labels by name; raises if it does not
    parse (the Prometheus text format, as prometheus_client's own parser reads it)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def get(url: str, timeout: float = 10.0) -> tuple[int, str, float]:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read().decode()
        return int(response.status), body, time.perf_counter() - began


def tree_figures(pid: int) -> dict[str, float]:
    """PSS (MB), open fds and threads, each summed over ``pid`` and its descendants."""
    pss = fds = threads = 0
    pids = [pid, *descendants(pid)]
    for member in pids:
        pss += memory_kb(member)[0]
        with contextlib.suppress(OSError):
            fds += len(os.listdir(f"/proc/{member}/fd"))
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("Threads:"):
                    threads += int(line.split()[1])
    return {"pss_mb": round(pss / 1024, 2), "fds": fds, "threads": threads, "processes": len(pids)}


def trend(times_s: Sequence[float], values: Sequence[float], warmup_s: float) -> dict[str, Any]:
    """Least-squares slope per hour (numpy.polyfit, degree 1) over the samples at or after
    ``warmup_s``, with their min, max, swing and the growth the line makes over them."""
    t = np.asarray(times_s, dtype=float)
    v = np.asarray(values, dtype=float)
    kept = t >= warmup_s
    t, v = t[kept], v[kept]
    if t.size < 2 or float(t[-1] - t[0]) <= 0:
        return {"samples": int(t.size), "slope_per_hour": None, "fitted_growth": None}
    hours = (t - t[0]) / 3600
    slope = float(np.polyfit(hours, v, 1)[0])
    return {
        "samples": int(t.size),
        "slope_per_hour": round(slope, 4),
        "fitted_growth": round(slope * float(hours[-1]), 4),
        "min": round(float(v.min()), 2),
        "max": round(float(v.max()), 2),
        "swing": round(float(v.max() - v.min()), 2),
        "first": round(float(v[0]), 2),
        "last": round(float(v[-1]), 2),
        "window_seconds": round(float(t[-1] - t[0]), 1),
    }


def log_figures(log: Path | None) -> dict[str, Any]:
    """What the agent logged that an operator would look at: tracebacks, ERROR and WARNING
    lines (reported beside the targets, not judged: a broker kill is meant to warn)."""
    if log is None or not log.exists():
        return {}
    lines = log.read_text(errors="replace").splitlines()
    errors = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
    return {
        "tracebacks": sum(1 for line in lines if line.startswith("Traceback")),
        "errors": len(errors),
        "warnings": sum(1 for line in lines if " WARNING " in line),
        "reloads_applied": sum(1 for line in lines if "reload: thresholds applied" in line),
        "error_examples": [line[:200] for line in errors[:3]],
    }


def agent_config(tree: Path, listen: int, broker: int, record: Path, busy: float, args: Any) -> str:
    return (
        f'[source]\nspec = "sysfs"\nsysfs_root = "{tree}"\ninterval = "1ms"\n'
        f"[thresholds]\nbusy = {busy}\n"
        f'[listen]\naddress = "127.0.0.1:{listen}"\n'
        f'[mqtt]\nurl = "mqtt://127.0.0.1:{broker}"\nspool_messages = {args.spool_messages}\n'
        f'[recording]\npath = "{record}"\npiece_seconds = {args.piece_seconds}\n'
        f'max_bytes = "{args.retention_bytes}"\nmax_age = "{args.retention_age}"\n'
    )


class CLoop:
    """The C reference loop on the same files, window after window until stopped."""

    def __init__(self, files: list[str], window: float) -> None:
        self.files = files
        self.window = window
        self.windows: list[dict[str, Any]] = []
        self.error: str | None = None
        self.stopping = threading.Event()
        self.ends = float("inf")
        try:
            self.binary = build_reference()
        except SystemExit as exc:  # no compiler: build_reference exits, the soak reports it
            raise SoakFailed(str(exc)) from None
        self.cpu = default_cpu()
        self.thread = threading.Thread(target=self._run, name="c-loop", daemon=True)

    def _run(self) -> None:
        config = Configuration("1ms-sysfs", INTERVAL_NS, ())
        clock = CpuClock()
        try:
            while not self.stopping.is_set():
                length = min(self.window, self.ends - time.monotonic())
                if length < 1:
                    break
                began = time.monotonic()
                measured = run_reference(self.binary, config, self.cpu, length, clock, self.files)
                self.windows.append(
                    {
                        "start": began,
                        "ticks": measured.ticks,
                        "missed": measured.missed,
                        "realtime": measured.realtime,
                        "cpu": measured.cpu,
                    }
                )
        except Exception as exc:  # reported in the JSON line, not a traceback
            self.error = f"C loop: {exc}"

    def since(self, moment: float) -> dict[str, Any]:
        kept = [w for w in list(self.windows) if w["start"] >= moment]
        ticks = sum(w["ticks"] for w in kept)
        missed = sum(w["missed"] for w in kept)
        return {
            "windows": len(kept),
            "ticks": ticks,
            "missed": missed,
            "missed_tick_fraction": round(missed / (ticks + missed), 6) if ticks else None,
            "realtime": all(w["realtime"] for w in kept) if kept else None,
            "cpu": kept[0]["cpu"] if kept else None,
        }


@contextlib.contextmanager
def started(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Soak:
    """The run's state; ``result`` holds every figure measured so far."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.result: dict[str, Any] = {
            "benchmark": "soak",
            "settings": {
                key: getattr(args, key)
                for key in (
                    "duration",
                    "warmup",
                    "scrape_every",
                    "storm_every",
                    "storm_size",
                    "hup_every",
                    "broker_restart_every",
                    "broker_down",
                    "broker_signal",
                    "sample_every",
                    "c_window",
                    "retention_bytes",
                    "retention_age",
                )
            },
            "loadavg_before": loadavg(),
            "error": None,
        }
        self.samples: list[dict[str, Any]] = []
        self.scrapes = 0
        self.scrape_errors: list[str] = []
        self.storms: list[dict[str, Any]] = []
        self.hups = 0
        self.broker_restarts = 0
        self.restarts_seen = 0.0
        self.last_values: dict[str, float] = {}
        self.warm_values: dict[str, float] | None = None
        self.events: list[tuple[float, str]] = []  # (seconds since start, what happened)
        self.interrupted = False
        self.warm_moment = float("inf")  # when the warm-up ended, on the monotonic clock
        self.agent_log: Path | None = None
        self.loop_end_values: dict[str, float] = {}  # the last scrape before the finish

    # -- one scrape, checked -----------------------------------------------------------------

    def checked_scrape(self, url: str, bodies: set[str] | None = None) -> dict[str, float] | None:
        try:
            status, body, _ = get(url)
        except (OSError, urllib.error.URLError) as exc:
            self.scrape_errors.append(f"GET failed: {exc}")
            return None
        if status != 200:
            self.scrape_errors.append(f"HTTP {status}")
            return None
        digest = hashlib.sha1(body.encode()).hexdigest()
        if bodies is not None and digest in bodies:
            return None  # the same shared exposition: parsed once
        try:
            values = parse_exposition(body)
        except Exception as exc:
            self.scrape_errors.append(f"does not parse: {exc}")
            return None
        if bodies is not None:
            bodies.add(digest)
        return values

    def storm(self, url: str) -> dict[str, Any]:
        size = self.args.storm_size
        barrier = threading.Barrier(size)

        def one(_: int) -> tuple[int, str, float] | str:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(STORM_BREAK_SECONDS)
            try:
                return get(url, timeout=STORM_BREAK_SECONDS)
            except (OSError, urllib.error.URLError) as exc:
                return f"GET failed: {exc}"

        with ThreadPoolExecutor(max_workers=size, thread_name_prefix="storm") as pool:
            answers = list(pool.map(one, range(size)))
        latencies = []
        parsed: set[str] = set()
        for answer in answers:
            if isinstance(answer, str):
                self.scrape_errors.append(answer)
                continue
            status, body, seconds = answer
            latencies.append(seconds)
            if status != 200:
                self.scrape_errors.append(f"HTTP {status} in a storm")
                continue
            digest = hashlib.sha1(body.encode()).hexdigest()
            if digest not in parsed:
                parsed.add(digest)
                try:
                    parse_exposition(body)
                except Exception as exc:
                    self.scrape_errors.append(f"does not parse: {exc}")
        self.scrapes += size
        array = np.array(latencies) * 1e3 if latencies else np.array([np.nan])
        return {
            "answered": len(latencies),
            "p50_ms": round(float(np.percentile(array, 50)), 1),
            "max_ms": round(float(np.max(array)), 1),
        }

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> None:
        args = self.args
        mosquitto = args.mosquitto or find_mosquitto()
        if mosquitto is None or not os.access(mosquitto, os.X_OK):
            raise SoakFailed(f"mosquitto not found ({mosquitto or 'not on PATH'})")
        with tempfile.TemporaryDirectory(prefix="burstscope-soak-") as scratch_name:
            scratch = Path(scratch_name)
            try:
                self._run_in(scratch, mosquitto)
            finally:
                if args.keep_logs:
                    for log in scratch.glob("*.log"):
                        (Path(args.keep_logs) / log.name).write_bytes(log.read_bytes())
                    broker_log = scratch / "broker" / "mosquitto.log"
                    if broker_log.exists():
                        (Path(args.keep_logs) / "mosquitto.log").write_bytes(
                            broker_log.read_bytes()
                        )

    def _run_in(self, scratch: Path, mosquitto: str) -> None:
        args = self.args
        tree, record = scratch / "sysfs", scratch / "recording"
        (scratch / "broker").mkdir()
        writer_command = [
            *burstscope_command(),
            "simulate",
            "--sysfs",
            str(tree),
            "--duration",
            str(args.duration + 600),
        ]
        broker = Broker(mosquitto, scratch / "broker")
        subscriber: Subscriber | None = None
        c_loop: CLoop | None = None
        try:
            with started(writer_command, scratch / "simulate.log") as writer:
                wait_for_tree(tree, writer)
                broker.start()
                url = f"mqtt://127.0.0.1:{broker.port}"
                subscriber = Subscriber(url, f"soak-{os.getpid()}", scratch / "events.log")
                if not subscriber.subscribed.wait(60):
                    raise SoakFailed("burstscope events did not subscribe within 60 s")
                listen = free_port()
                config = scratch / "agent.toml"
                config.write_text(
                    agent_config(tree, listen, broker.port, record, BUSY_THRESHOLDS[0], args)
                )
                command = [*burstscope_command(), "agent", "--config", str(config)]
                self.agent_log = scratch / "agent.log"
                with started(command, self.agent_log) as agent:
                    metrics = f"http://127.0.0.1:{listen}/metrics"
                    self._wait_ready(agent, metrics)
                    if not args.no_c_loop:
                        c_loop = CLoop(counter_files(tree), args.c_window)
                        c_loop.ends = time.monotonic() + args.duration
                        c_loop.thread.start()
                    try:
                        self._loop(agent, metrics, config, tree, listen, broker, record, c_loop)
                    finally:
                        self._finish(agent, metrics, broker, subscriber)
        finally:
            if c_loop is not None:
                c_loop.stopping.set()
                c_loop.thread.join(self.args.c_window + 30)
                self._c_figures(c_loop)
            if subscriber is not None:
                subscriber.stop()
                self.result["mqtt"] = subscriber.lost()
            broker.kill()

    def _wait_ready(self, agent: subprocess.Popen[bytes], metrics: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if agent.poll() is not None:
                raise SoakFailed(f"agent exited with status {agent.returncode} before ready")
            with contextlib.suppress(Exception):
                values = parse_exposition(get(metrics)[1])
                if values.get("burstscope_sampler_ticks_total", 0) > 0:
                    return
            time.sleep(0.1)
        raise SoakFailed("agent not ready within 60 s")

    def _loop(
        self,
        agent: subprocess.Popen[bytes],
        metrics: str,
        config: Path,
        tree: Path,
        listen: int,
        broker: Broker,
        record: Path,
        c_loop: CLoop | None,
    ) -> None:
        args = self.args
        start = time.monotonic()
        end = start + args.duration
        due = {
            "scrape": start,
            "storm": start + args.storm_every,
            "hup": start + args.hup_every,
            "broker_kill": start + args.broker_restart_every,
            "broker_start": float("inf"),
            "sample": start,
        }
        storm_thread: threading.Thread | None = None
        storm_results: list[dict[str, Any]] = []
        busy_index = 0
        while (now := time.monotonic()) < end and not self.interrupted:
            if agent.poll() is not None:
                raise SoakFailed(f"agent exited with status {agent.returncode}")
            if c_loop is not None and c_loop.error is not None:
                raise SoakFailed(c_loop.error)
            elapsed = now - start
            if now >= due["scrape"]:
                due["scrape"] += args.scrape_every
                values = self.checked_scrape(metrics)
                self.scrapes += 1
                if values is not None:
                    self._observe(values, elapsed)
            storming = storm_thread is not None and storm_thread.is_alive()
            if now >= due["storm"] and not storming:
                due["storm"] += args.storm_every
                self.events.append((elapsed, "storm"))
                storm_thread = threading.Thread(
                    target=lambda: storm_results.append(self.storm(metrics)), name="storm"
                )
                storm_thread.start()
                storming = True
            if now >= due["hup"]:
                due["hup"] += args.hup_every
                busy_index ^= 1
                config.write_text(
                    agent_config(
                        tree, listen, broker.port, record, BUSY_THRESHOLDS[busy_index], args
                    )
                )
                agent.send_signal(signal.SIGHUP)
                self.hups += 1
                self.events.append((elapsed, "hup"))
            if now >= due["broker_kill"]:
                due["broker_kill"] += args.broker_restart_every
                broker.kill(signal.Signals[f"SIG{args.broker_signal}"])
                self.events.append((elapsed, "broker_kill"))
                due["broker_start"] = now + args.broker_down
            if now >= due["broker_start"]:
                due["broker_start"] = float("inf")
                broker.start()
                self.broker_restarts += 1
                self.events.append((elapsed, "broker_start"))
            if now >= due["sample"] and not storming:
                due["sample"] += args.sample_every
                sample: dict[str, Any] = {
                    **tree_figures(agent.pid),
                    "t": round(elapsed, 2),
                    "ticks": self.last_values.get("burstscope_sampler_ticks_total"),
                    "missed": self.last_values.get("burstscope_sampler_missed_ticks_total"),
                    "spooled": self.last_values.get("burstscope_mqtt_spool_messages"),
                }
                self.samples.append(sample)
            waits = [value for key, value in due.items() if key != "sample" or not storming]
            time.sleep(max(0.0, min(min(waits), end) - time.monotonic()))
        self.loop_end_values = self.last_values  # the span the C loop's windows cover
        if storm_thread is not None:
            storm_thread.join(STORM_BREAK_SECONDS * 2)
        self.storms = storm_results
        if self.interrupted:
            raise SoakFailed("interrupted")

    def _observe(self, values: dict[str, float], elapsed: float) -> None:
        self.last_values = values
        self.restarts_seen = max(self.restarts_seen, values.get("burstscope_restarts_total", 0.0))
        if self.warm_values is None and elapsed >= self.args.warmup:
            self.warm_values = dict(values)
            self.warm_moment = time.monotonic()

    def _finish(
        self,
        agent: subprocess.Popen[bytes],
        metrics: str,
        broker: Broker,
        subscriber: Subscriber,
    ) -> None:
        """Broker back, spool drained, agent stopped: its offline status says its last seq."""
        self.result["figures_at_end"] = {}
        if agent.poll() is None:
            if not broker.up:
                broker.start()
                self.broker_restarts += 1
            # Connected again with the backlog down to what the stop's flush delivers: the
            # spool is rarely empty at an instant, new messages keep coming while it drains.
            began = time.monotonic()
            spooled = None
            while time.monotonic() < began + 120:
                with contextlib.suppress(Exception):
                    values = parse_exposition(get(metrics)[1])
                    self._observe(values, float("-inf"))
                    spooled = values.get("burstscope_mqtt_spool_messages")
                    if values.get("burstscope_mqtt_connected") == 1 and (spooled or 0) < 200:
                        break
                time.sleep(0.5)
            # Every SIGHUP sent applied before the stop: the last may come in the run's final
            # seconds, and a loaded machine takes a while to reload (wait on it, bounded).
            applied_by = time.monotonic() + 30
            while (
                log_figures(self.agent_log).get("reloads_applied", 0) < self.hups
                and time.monotonic() < applied_by
            ):
                time.sleep(0.2)
            stopping = time.monotonic()
            agent.send_signal(signal.SIGTERM)
            try:
                self.result["agent_exit_status"] = agent.wait(30)
            except subprocess.TimeoutExpired:
                self.result["agent_exit_status"] = None
            stopped = time.monotonic()
            subscriber.offline.wait(30)
            self.result["finish"] = {
                "drain_seconds": round(stopping - began, 2),
                "spooled_at_stop": spooled,
                "stop_seconds": round(stopped - stopping, 2),
                "offline_status_seconds": round(time.monotonic() - stopped, 2),
            }
        else:
            self.result["agent_exit_status"] = agent.returncode
        self.result["agent_log"] = log_figures(self.agent_log)
        values = self.last_values
        for name in (
            "burstscope_sampler_ticks_total",
            "burstscope_sampler_missed_ticks_total",
            "burstscope_restarts_total",
            "burstscope_mqtt_dropped_messages_total",
            "burstscope_mqtt_published_messages_total",
            "burstscope_recording_bytes",
            "burstscope_recording_deleted_pieces_total",
            "burstscope_recording_dropped_samples_total",
        ):
            self.result["figures_at_end"][name] = values.get(name)

    def _c_figures(self, c_loop: CLoop) -> None:
        self.result["c_loop"] = {
            "after_warmup": c_loop.since(self.warm_moment),
            "whole_run": c_loop.since(0.0),
            "window_seconds": c_loop.window,
            "error": c_loop.error,
        }

    # -- the figures -------------------------------------------------------------------------

    def figures(self) -> None:
        args, result = self.args, self.result
        times = [sample["t"] for sample in self.samples]
        result["tree"] = {
            name: trend(times, [sample[name] for sample in self.samples], args.warmup)
            for name in ("pss_mb", "fds", "threads")
        }
        result["tree"]["processes"] = sorted({sample["processes"] for sample in self.samples})
        result["samples"] = self.samples
        result["scrapes"] = self.scrapes
        result["scrape_errors"] = len(self.scrape_errors)
        result["scrape_error_examples"] = self.scrape_errors[:5]
        result["storms"] = self.storms
        result["hups"] = self.hups
        result["broker_restarts"] = self.broker_restarts
        result["restarts"] = self.restarts_seen
        result["events"] = [(round(t, 2), what) for t, what in self.events]
        warm, last = self.warm_values, self.loop_end_values or self.last_values
        agent: dict[str, Any] = {"missed_tick_fraction": None}
        if warm is not None and last:
            ticks = last["burstscope_sampler_ticks_total"] - warm["burstscope_sampler_ticks_total"]
            missed = (
                last["burstscope_sampler_missed_ticks_total"]
                - warm["burstscope_sampler_missed_ticks_total"]
            )
            agent = {
                "ticks": int(ticks),
                "missed": int(missed),
                "missed_tick_fraction": round(missed / (ticks + missed), 6) if ticks else None,
            }
        agent["by_interval"] = self._missed_by_interval()
        result["agent"] = agent
        result["loadavg_after"] = loadavg()
        result["targets"] = self.verdicts()
        result["targets_met"] = all(verdict["met"] for verdict in result["targets"].values())

    def _missed_by_interval(self) -> dict[str, Any]:
        """The agent's missed ticks per sample interval after the warm-up, split by whether a
        storm, a reload or a broker kill or start fell in it: where the misses come from."""
        busy = quiet = 0.0
        busy_intervals = quiet_intervals = 0
        for before, after in zip(self.samples, self.samples[1:], strict=False):
            if (
                before["t"] < self.args.warmup
                or before["missed"] is None
                or after["missed"] is None
            ):
                continue
            missed = after["missed"] - before["missed"]
            if any(before["t"] <= t < after["t"] for t, _ in self.events):
                busy += missed
                busy_intervals += 1
            else:
                quiet += missed
                quiet_intervals += 1
        return {
            "with_an_event": {"intervals": busy_intervals, "missed": int(busy)},
            "quiet": {"intervals": quiet_intervals, "missed": int(quiet)},
        }

    def verdicts(self) -> dict[str, dict[str, Any]]:
        result = self.result
        out: dict[str, dict[str, Any]] = {}

        def judge(name: str, value: Any, target: Any, met: bool) -> None:
            out[name] = {"value": value, "target": target, "met": bool(met)}

        pss = result["tree"]["pss_mb"]["slope_per_hour"]
        limit = TARGETS["pss_slope_mb_per_hour"]
        judge("pss_slope_mb_per_hour", pss, limit, pss is not None and pss <= limit)
        for name in ("fds", "threads"):
            growth = result["tree"][name]["fitted_growth"]
            judge(f"{name}_flat", growth, "< 1 over the window", growth is not None and growth < 1)
        judge("scrape_errors", result["scrape_errors"], 0, result["scrape_errors"] == 0)
        judge("restarts", result["restarts"], 0, result["restarts"] == 0)
        c = result.get("c_loop", {}).get("after_warmup", {}).get("missed_tick_fraction")
        agent = result["agent"]["missed_tick_fraction"]
        bound = None if c is None else round(c + TARGETS["missed_ticks_over_c"], 6)
        judge(
            "missed_tick_fraction",
            agent,
            bound,
            agent is not None and bound is not None and agent <= bound,
        )
        mqtt = result.get("mqtt", {})
        dropped = result.get("figures_at_end", {}).get("burstscope_mqtt_dropped_messages_total")
        lost = mqtt.get("lost")
        judge(
            "mqtt_lost_within_dropped",
            lost,
            dropped,
            lost is not None
            and dropped is not None
            and mqtt.get("last_seq", 0) > 0
            and lost <= dropped,
        )
        return out


def summary(result: dict[str, Any]) -> str:
    lines = [
        f"soak {result['settings']['duration']:g} s (warm-up {result['settings']['warmup']:g} s),"
        f" load average before {result['loadavg_before']} after {result.get('loadavg_after')}",
    ]
    if result.get("error"):
        lines.append(f"FAILED: {result['error']}")
    tree = result.get("tree", {})
    for name in ("pss_mb", "fds", "threads"):
        t = tree.get(name, {})
        if t.get("slope_per_hour") is not None:
            lines.append(
                f"  {name:8} {t['first']} -> {t['last']} (min {t['min']}, max {t['max']}, swing "
                f"{t['swing']}), slope {t['slope_per_hour']}/h over {t['samples']} samples"
            )
    lines.append(
        f"  scrapes {result.get('scrapes')}, errors {result.get('scrape_errors')}; storms "
        f"{len(result.get('storms', []))}; SIGHUPs {result.get('hups')}; broker restarts "
        f"{result.get('broker_restarts')}; restarts {result.get('restarts')}"
    )
    agent, c = result.get("agent", {}), result.get("c_loop", {}).get("after_warmup", {})
    lines.append(
        f"  missed ticks: agent {agent.get('missed_tick_fraction')} ({agent.get('missed')} of "
        f"{agent.get('ticks')}), C loop {c.get('missed_tick_fraction')} ({c.get('missed')} of "
        f"{c.get('ticks')}); agent's by interval {agent.get('by_interval')}"
    )
    mqtt = result.get("mqtt", {})
    lines.append(
        f"  mqtt: {mqtt.get('distinct_seq')} seqs up to {mqtt.get('last_seq')} "
        f"({mqtt.get('last_seq_from')}), lost {mqtt.get('lost')}, dropped by the agent "
        f"{result.get('figures_at_end', {}).get('burstscope_mqtt_dropped_messages_total')}"
    )
    for name, verdict in result.get("targets", {}).items():
        mark = "met" if verdict["met"] else "MISSED"
        lines.append(f"  {name:26} {verdict['value']!s:>12} vs {verdict['target']!s:20} {mark}")
    return "\n".join(lines)


def positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add = parser.add_argument
    add("--json", action="store_true", help="print the one JSON line on stdout")
    add("--duration", type=positive, default=3600.0, help="seconds of soak (default 3600)")
    add("--warmup", type=float, default=600.0, help="seconds before the fit (default 600)")
    add("--scrape-every", type=positive, default=1.0, help="seconds between scrapes (1)")
    add("--storm-every", type=positive, default=120.0, help="seconds between storms (120)")
    add("--storm-size", type=int, default=100, help="concurrent scrapes a storm (100)")
    add("--hup-every", type=positive, default=60.0, help="seconds between SIGHUPs (60)")
    add(
        "--broker-restart-every",
        type=positive,
        default=300.0,
        help="seconds between broker kills (300)",
    )
    add(
        "--broker-signal",
        choices=("KILL", "TERM"),
        default="KILL",
        help="how the broker is stopped: KILL (a crash, default) or TERM (it saves and exits)",
    )
    add("--broker-down", type=positive, default=10.0, help="seconds the broker is away (10)")
    add("--sample-every", type=positive, default=10.0, help="seconds between tree samples (10)")
    add("--c-window", type=positive, default=30.0, help="seconds per C loop window (30)")
    add("--no-c-loop", action="store_true", help="no C reference loop beside the agent")
    add("--retention-bytes", default="8MB", help="[recording] max_bytes (8MB)")
    add("--retention-age", default="5m", help="[recording] max_age (5m)")
    add("--piece-seconds", type=positive, default=5.0, help="[recording] piece_seconds (5)")
    add("--spool-messages", type=int, default=100_000, help="[mqtt] spool_messages (100000)")
    add("--mosquitto", help="the mosquitto binary (default: found on PATH or /usr/sbin)")
    add("--keep-logs", metavar="DIR", help="copy the processes' logs here at the end")
    args = parser.parse_args(argv)
    if not 0 <= args.warmup < args.duration:
        parser.error("--warmup must be at least 0 and shorter than --duration")
    if args.storm_size < 1:
        parser.error("--storm-size must be at least 1")
    if args.broker_down >= args.broker_restart_every:
        parser.error("--broker-down must be shorter than --broker-restart-every")
    if args.keep_logs and not Path(args.keep_logs).is_dir():
        parser.error(f"--keep-logs {args.keep_logs}: not a directory")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    soak = Soak(args)

    def interrupt(signum: int, _frame: object) -> None:
        soak.interrupted = True

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    try:
        soak.run()
    except (Exception, SystemExit) as exc:  # every failure still ends in the JSON line
        soak.result["error"] = f"{type(exc).__name__}: {exc}"
    try:
        soak.figures()
    except Exception as exc:
        soak.result.setdefault("targets_met", False)
        soak.result["error"] = soak.result["error"] or f"figures: {type(exc).__name__}: {exc}"
    if args.json:
        print(json.dumps(soak.result), flush=True)
    print(summary(soak.result), file=sys.stderr, flush=True)
    return 0 if soak.result.get("targets_met") and not soak.result["error"] else 1


if __name__ == "__main__":
    sys.exit(main())
