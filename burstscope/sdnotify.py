"""systemd readiness and watchdog: sd_notify(3) by hand, and pings only while sampling advances.

sd_notify is one datagram to the AF_UNIX socket named by ``$NOTIFY_SOCKET``; a leading
``@`` names the abstract namespace (systemd-devel, 2020-03). No dependency: the usual
package is unmaintained and swallows errors. A failed send is logged once, not silently
dropped and not logged every few seconds either.

The watchdog pings every half of ``$WATCHDOG_USEC`` (sd_watchdog_enabled(3)) but only
while the sampler's heartbeat is recent: a stalled or stopped sampler stops the pings,
and systemd restarts the unit after WatchdogSec.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

_LOG = logging.getLogger("burstscope.sdnotify")


class Notifier:
    """Sends sd_notify messages when started by systemd; does nothing otherwise."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self.path = path
        # "@name" is Linux's abstract namespace: a leading NUL byte in the address.
        self.address: str | bytes | None = (
            None if not path else ("\0" + path[1:]).encode() if path.startswith("@") else path
        )
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; False (logged once) when it fails."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(assignments).encode(), self.address)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                _LOG.error("sd_notify to %s failed: %s", self.path, exc)
            return False
        if self._failed:
            self._failed = False
            _LOG.info("sd_notify works again")
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets Type=notify-reload (systemd 253+) match the reload to this message.
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1", "STATUS=stopping")


def watchdog_period(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between pings (half of WATCHDOG_USEC), or None when no watchdog is ours."""
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = env.get("WATCHDOG_PID")
    if usec <= 0 or (pid is not None and pid.strip() != str(os.getpid())):
        return None
    return usec / 2e6


def heartbeat_recent(heartbeat_ns: int, interval_ns: int, period_seconds: float) -> bool:
    """The sampler ticked lately: within a ping period, or two intervals when those are longer.

    ``heartbeat_ns`` is the sampler's CLOCK_MONOTONIC at its last tick; the clock is
    system-wide, so the agent's process can compare it with its own monotonic time.
    """
    if heartbeat_ns <= 0:
        return False
    allowed = max(int(period_seconds * 1e9), 2 * interval_ns)
    return time.monotonic_ns() - heartbeat_ns <= allowed


class Watchdog:
    """A thread that sends WATCHDOG=1 every ``period`` seconds while ``healthy()`` says so."""

    def __init__(
        self, notifier: Notifier, period_seconds: float, healthy: Callable[[], bool]
    ) -> None:
        self.notifier = notifier
        self.period = period_seconds
        self.healthy = healthy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._withheld = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="burstscope-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                healthy = self.healthy()
            except Exception:  # a broken check must not look like progress
                _LOG.exception("watchdog health check failed")
                healthy = False
            if healthy:
                if self._withheld:
                    self._withheld = False
                    _LOG.info("sampler progresses again; watchdog pings resume")
                self.notifier.notify("WATCHDOG=1")
            elif not self._withheld:
                self._withheld = True
                _LOG.warning("sampler made no progress: withholding watchdog pings")
            if self._stop.wait(self.period):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
            self._thread = None
