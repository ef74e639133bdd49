"""The MQTT publisher: an async context manager that keeps a broker connection, drains the spool.

In aiomqtt's own style (its Client is an async context manager): ``async with
MqttPublisher(...) as publisher`` starts the delivery loop in a TaskGroup with named tasks;
``publisher.spawn`` adds the caller's loops to the same group. Delivery is at-least-once and
in order: the head of the spool is published at QoS 1 and removed only after the broker's
PUBACK, one message at a time, so a broken connection resends from the first unacknowledged
message and subscribers drop the duplicate by (host, run, seq). Reconnects use jittered,
capped exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import ssl
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiomqtt
from aiomqtt.exceptions import MqttConnectError

from burstscope.collector.mqtt.messages import Identity, encode, status_payload, status_topic
from burstscope.collector.mqtt.settings import MqttSettings, client_tls_context
from burstscope.collector.mqtt.spool import Message, Spool

_LOG = logging.getLogger("burstscope.mqtt")


class _LossReportedOnce(logging.Filter):
    """paho logs a connection the broker dropped at ERROR ("failed to receive on socket:
    [Errno 104] ...", paho/mqtt/client.py _packet_read) just before aiomqtt raises it as an
    MqttError, which ``_deliver`` logs once with its reason and the retry: the outage is
    one line, so paho's copy goes to DEBUG. Any other paho message passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and str(record.msg).startswith(
            "failed to receive on socket"
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return _CLIENT_LOG.isEnabledFor(logging.DEBUG)
        return True


# The logger aiomqtt hands to paho (its default is the bare name "mqtt").
_CLIENT_LOG = logging.getLogger("burstscope.mqtt.client")
_CLIENT_LOG.addFilter(_LossReportedOnce())
BATCH = 64
ACK_TIMEOUT_SECONDS = 5.0
# CONNACK refusals that retrying cannot fix (MQTT 5 reason codes; paho maps 3.1.1's 4 and 5).
_REFUSED = {4: "bad user name or password", 5: "not authorized"}
_REFUSED_V5 = {134: "bad user name or password", 135: "not authorized"}


class Outcome(enum.Enum):
    CONNECTED = "connected"
    REFUSED = "refused"  # fatal: bad credentials or a certificate the broker will not accept
    UNREACHABLE = "unreachable"  # keep trying


@dataclass(slots=True)
class PublisherStats:
    """Written by the event loop thread, read by scrape threads (plain ints and bools)."""

    connected: bool = False
    spool_depth: int = 0
    dropped: int = 0
    published: int = 0
    last_seq: int = 0


class Backoff:
    """Delays of min(cap, initial * 2**step), each drawn uniformly from its upper half."""

    def __init__(
        self, initial: float, cap: float, uniform: Callable[[float, float], float] = random.uniform
    ) -> None:
        self.initial = initial
        self.cap = cap
        self.step = 0
        self._uniform = uniform

    @property
    def ceiling(self) -> float:
        return float(min(self.cap, self.initial * 2.0**self.step))

    @property
    def at_cap(self) -> bool:
        return self.ceiling >= self.cap

    def next_delay(self) -> float:
        ceiling = self.ceiling
        if not self.at_cap:
            self.step += 1
        return float(self._uniform(ceiling / 2, ceiling))

    def reset(self) -> None:
        self.step = 0


def refusal(exc: BaseException) -> str | None:
    """Why the broker refused us for good, or None when retrying may help."""
    if isinstance(exc, MqttConnectError):
        code = exc.rc
        value = getattr(code, "value", code)
        if isinstance(value, int):
            if value in _REFUSED_V5:
                return _REFUSED_V5[value]
            if not hasattr(code, "value") and value in _REFUSED:
                return _REFUSED[value]
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return f"TLS certificate verification failed ({exc})"
    return None


def client(settings: MqttSettings, tls: ssl.SSLContext | None, **options: Any) -> aiomqtt.Client:
    """An aiomqtt client for these settings: broker, credentials, keepalive, TLS."""
    return aiomqtt.Client(
        settings.broker.host,
        settings.broker.port,
        username=settings.username,
        password=settings.password,
        keepalive=settings.keepalive_seconds,
        tls_context=tls,
        logger=_CLIENT_LOG,
        **options,
    )


async def probe(settings: MqttSettings) -> tuple[Outcome, str]:
    """Connect once and leave: whether these settings reach a broker that accepts them."""
    try:
        async with (
            asyncio.timeout(settings.connect_check_seconds),
            client(
                settings,
                client_tls_context(settings),
                clean_session=True,
                timeout=ACK_TIMEOUT_SECONDS,
            ),
        ):
            return Outcome.CONNECTED, settings.endpoint
    except (aiomqtt.MqttError, TimeoutError, OSError) as exc:
        reason = refusal(exc)
        if reason is not None:
            return Outcome.REFUSED, reason
        return Outcome.UNREACHABLE, str(exc) or type(exc).__name__


async def _until_disconnected(client: aiomqtt.Client) -> None:
    # aiomqtt's message iterator raises MqttError when the connection drops; nothing is
    # subscribed, so this is only a disconnect detector while the spool is idle.
    async for _ in client.messages:
        pass


async def _wait(event: asyncio.Event) -> None:
    await event.wait()


async def _race(work: Coroutine[Any, Any, None], watch: asyncio.Task[None]) -> None:
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
        await task
    watch.result()
    raise aiomqtt.MqttError("disconnected")


class MqttPublisher:
    """Owns the connection, the retained status and in-order delivery of a spool."""

    def __init__(
        self,
        settings: MqttSettings,
        spool: Spool,
        identity: Identity,
        stats: PublisherStats | None = None,
        on_first_attempt: Callable[[Outcome, str], None] | None = None,
        first_seq: int = 0,
    ) -> None:
        """``first_seq``: the last seq a previous publisher of this run used (a live
        reconfiguration keeps one sequence per run)."""
        self.settings = settings
        self.identity = identity
        self.stats = stats or PublisherStats()
        self.closing = asyncio.Event()  # spawned loops flush and return when set
        self._spool = spool
        self._on_first_attempt = on_first_attempt
        self._attempted = False
        self._tls = client_tls_context(settings)
        self._backoff = Backoff(settings.backoff_initial_seconds, settings.backoff_max_seconds)
        self._wake = asyncio.Event()
        self._finishing = asyncio.Event()
        self._finish_deadline = 0.0
        self._backoff_delay = 0.0
        self._group = asyncio.TaskGroup()
        self._spawned: list[asyncio.Task[None]] = []
        self._seq = first_seq
        # A reconfiguration hands the spool to the next publisher instead of closing it,
        # and says why this connection's status goes offline.
        self.keep_spool = False
        self.offline_reason = "stopped"
        self._sync_stats()

    @property
    def seq(self) -> int:
        """The seq of the last message numbered so far."""
        return self._seq

    async def __aenter__(self) -> MqttPublisher:
        await self._group.__aenter__()
        self._group.create_task(self._deliver(), name="mqtt-delivery")
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.closing.set()
        await asyncio.gather(*self._spawned, return_exceptions=True)
        self._finish_deadline = time.monotonic() + self.settings.stop_flush_seconds
        self._finishing.set()
        self._wake.set()
        try:
            await self._group.__aexit__(kind, value, traceback)
        finally:
            if not self.keep_spool:
                if len(self._spool):
                    where = "kept on disk" if self.settings.spool_dir else "lost"
                    _LOG.warning(
                        "%d MQTT message(s) undelivered at stop (%s)", len(self._spool), where
                    )
                self._spool.close()

    def spawn(self, loop: Coroutine[Any, Any, None], name: str) -> None:
        """Run a caller's loop in the publisher's TaskGroup; it must return once closing is set."""
        self._spawned.append(self._group.create_task(loop, name=name))

    def enqueue(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        """Number the payloads (seq) and spool them, in order; never blocks."""
        messages = []
        for topic, payload in items:
            self._seq += 1
            messages.append(Message(topic, encode({**payload, "seq": self._seq})))
        self._spool.append(messages)
        self.stats.last_seq = self._seq
        self._sync_stats()
        self._wake.set()

    def _sync_stats(self) -> None:
        self.stats.spool_depth = len(self._spool)
        self.stats.dropped = self._spool.dropped

    def _client(self) -> aiomqtt.Client:
        will = aiomqtt.Will(
            status_topic(self.identity.host),
            encode({**status_payload(self.identity, False, None), "reason": "connection lost"}),
            qos=1,
            retain=True,
        )
        return client(
            self.settings, self._tls, will=will, clean_session=True, timeout=ACK_TIMEOUT_SECONDS
        )

    def _first(self, outcome: Outcome, detail: str) -> None:
        if not self._attempted:
            self._attempted = True
            if self._on_first_attempt is not None:
                self._on_first_attempt(outcome, detail)

    async def _deliver(self) -> None:
        endpoint = self.settings.endpoint
        while True:
            last_try = self._finishing.is_set()
            try:
                async with (
                    asyncio.timeout(self.settings.stop_flush_seconds if last_try else None),
                    self._client() as client,
                ):
                    self.stats.connected = True
                    self._backoff.reset()
                    self._first(Outcome.CONNECTED, endpoint)
                    _LOG.info(
                        "connected to MQTT broker %s; %d message(s) to deliver",
                        endpoint,
                        len(self._spool),
                    )
                    await self._session(client)
                    return
            except (aiomqtt.MqttError, TimeoutError) as exc:
                self.stats.connected = False
                reason = refusal(exc)
                fatal = reason is not None and not self._attempted  # start() reports it
                self._first(Outcome.REFUSED if reason else Outcome.UNREACHABLE, reason or str(exc))
                if last_try or self._finishing.is_set():
                    return
                self._log_failure(endpoint, reason or str(exc) or type(exc).__name__, quiet=fatal)
            finally:
                self.stats.connected = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._backoff_delay):
                    await self._finishing.wait()

    def _log_failure(self, endpoint: str, reason: str, quiet: bool = False) -> None:
        at_cap_before = self._backoff.at_cap
        self._backoff_delay = self._backoff.next_delay()
        if not at_cap_before and not quiet:
            suffix = (
                f"retrying every {self._backoff.cap:g} s or less, quietly, until it answers"
                if self._backoff.at_cap
                else f"retrying in {self._backoff_delay:.1f} s"
            )
            _LOG.warning("MQTT broker %s unreachable (%s); %s", endpoint, reason, suffix)

    async def _session(self, client: aiomqtt.Client) -> None:
        watch = asyncio.create_task(_until_disconnected(client), name="mqtt-watch")
        host = self.identity.host
        try:
            online = encode(status_payload(self.identity, True, self.stats.last_seq))
            await _race(client.publish(status_topic(host), online, qos=1, retain=True), watch)
            while True:
                self._wake.clear()
                batch = self._spool.peek(BATCH)
                if not batch:
                    if self._finishing.is_set():
                        break
                    await _race(_wait(self._wake), watch)
                    continue
                for entry in batch:
                    message = entry.message
                    await _race(client.publish(message.topic, message.payload, qos=1), watch)
                    self._spool.remove_through(entry.id)
                    self.stats.published += 1
                    self._sync_stats()
                if self._finishing.is_set() and time.monotonic() > self._finish_deadline:
                    break
            offline = {**status_payload(self.identity, False, self.stats.last_seq)}
            offline["reason"] = self.offline_reason
            await _race(
                client.publish(status_topic(host), encode(offline), qos=1, retain=True), watch
            )
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await watch
