"""The /metrics endpoint and the probes: a router over a shared exposition, behind the web
configuration (collector/web_config.py: (m)TLS, basic auth, headers, rate limit).

prometheus-client's own ``start_http_server`` answers every path with metrics; an
exporter should answer 404 for unknown paths, so the app is a small router (/metrics, /,
/-/healthy, /-/ready), served with
the library's threading WSGI server (stdlib socketserver + wsgiref), hardened for a
node that hundreds of clients and a few bad ones can reach:

- the TLS handshake runs in the connection's own thread under HANDSHAKE_SECONDS, never in
  the accepting thread, so one silent TCP connection cannot stop every HTTPS scrape;
- every connection reads under READ_TIMEOUT_SECONDS (socket timeout per recv);
- at most MAX_CONNECTIONS are open at once; at the cap the oldest connection that has not
  sent a request line is closed to make room, so idle clients cannot keep a scrape out;
  when all are busy requests a new one is answered 503 (HTTP) or closed (HTTPS);
- the listen backlog is LISTEN_BACKLOG (the kernel caps it at net.core.somaxconn), not 5;
- the exposition is built at most once per EXPOSITION_MAX_AGE_SECONDS and shared by every
  scrape in that time, encoded once per format and ``name[]`` filter (matched against
  sample names, as prometheus-client's restricted registry does).

Why not another server: waitress has no TLS; cheroot and uvicorn would each add a
dependency and a second threading or event-loop model beside the one the agent already
runs, for the four limits above, which the standard library's socket timeouts give us
in a few lines. A thread per connection is cheap at MAX_CONNECTIONS, and the sampler runs
in its own process, so scrape threads cannot delay a tick through the GIL.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric

from burstscope.collector.threads import name_os_thread
from burstscope.collector.web_config import (
    BasicAuth,
    TokenBucket,
    WebConfig,
    WebConfigError,
    san_allowed,
    server_context,
)

# Registered nowhere yet; chosen from the unassigned range of the Prometheus default port
# allocations wiki so it does not clash with node_exporter (9100) or dcgm-exporter (9400).
DEFAULT_PORT = 9847
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

_INDEX = b"""<html><head><title>burstscope</title></head><body>
<h1>burstscope</h1><p><a href="/metrics">/metrics</a></p>
<p><a href="/-/healthy">/-/healthy</a> <a href="/-/ready">/-/ready</a></p></body></html>
"""
# Liveness and readiness, as Prometheus and Alertmanager name theirs. They answer without
# basic auth (and without counting against rate_limit): the kubelet's httpGet probes would
# otherwise need the password in clear in the pod spec, and all they tell is "serving" and
# "sampling". TLS still applies: a client certificate the server requires is required here.
PROBES = ("/-/healthy", "/-/ready")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

HANDSHAKE_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 512
LISTEN_BACKLOG = 1024
EXPOSITION_MAX_AGE_SECONDS = 0.5
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
    b"Connection: close\r\n\r\ntoo many connections\n"
)


class HttpError(Exception):
    """The endpoint cannot be served: bad address, port in use, unreadable TLS files."""


def parse_listen(text: str) -> tuple[str, int]:
    """ "ADDR:PORT", "[v6]:PORT" or ":PORT" (all interfaces) into a (host, port) pair.

    Port 0 asks the kernel for a free port (bind(2)); MetricsServer.address says which.
    """
    host, separator, port_text = text.rpartition(":")
    if not separator or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise HttpError(f"--listen {text!r} is not ADDR:PORT (e.g. {DEFAULT_LISTEN})")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if host != "localhost":
                raise HttpError(f"--listen {text!r}: {host!r} is not an IP address") from None
    return host, int(port_text)


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: scrapes every second would drown the journal."""

    timeout = READ_TIMEOUT_SECONDS  # StreamRequestHandler.setup() applies it to the socket

    def parse_request(self) -> bool:
        # The request line is in: this connection is a client, not an idler to evict.
        server = self.server
        if isinstance(server, _HardenedServer):
            server.mark_active(self.connection)
        return bool(super().parse_request())

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Families:
    """A fixed list of families as a collector, for prometheus-client's encoders."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class SharedExposition:
    """The registry collected at most once per ``max_age`` seconds; encodings shared.

    Concurrent scrapes wait on one lock: the first builds, the rest take its bytes. A
    ``name[]`` filter keeps the samples whose names it lists, as prometheus-client's
    ``restricted_registry`` does (which finds nothing for a collector that describes no
    names up front, like ours).
    """

    def __init__(
        self, registry: CollectorRegistry, max_age: float = EXPOSITION_MAX_AGE_SECONDS
    ) -> None:
        self._registry = registry
        self._max_age = max_age
        self._lock = threading.Lock()
        self._built = -float("inf")
        self._families: list[Metric] = []
        self._encoded: dict[tuple[str, tuple[str, ...], bool], tuple[bytes, str]] = {}
        self.builds = 0

    def render(
        self, accept: str | None, names: Iterable[str] = (), compress: bool = False
    ) -> tuple[bytes, str]:
        """The body and content type for one scrape."""
        encoder, content_type = choose_encoder(accept or "")
        key = (content_type, tuple(sorted(set(names))), compress)
        with self._lock:
            now = time.monotonic()
            if now - self._built >= self._max_age:
                self._families = list(self._registry.collect())
                self._built = now
                self._encoded = {}
                self.builds += 1
            cached = self._encoded.get(key)
            if cached is None:
                families: Iterable[Metric] = self._families
                if key[1]:
                    wanted = set(key[1])
                    families = [
                        restricted
                        for family in self._families
                        if (restricted := _restricted(family, wanted)) is not None
                    ]
                body = encoder(_Families(families))
                if compress:
                    body = gzip.compress(body)
                cached = self._encoded[key] = (body, content_type)
        return cached


def _restricted(family: Metric, names: set[str]) -> Metric | None:
    samples = [sample for sample in family.samples if sample.name in names]
    if not samples:
        return None
    restricted = Metric(family.name, family.documentation, family.type, family.unit)
    restricted.samples = samples
    return restricted


class Guard:
    """What the web configuration puts in front of every path but the probes, in
    exporter-toolkit's order (web/handler.go): rate limit, headers, basic auth."""

    def __init__(self, web: WebConfig | None) -> None:
        self.auth = BasicAuth(web.users) if web is not None and web.users else None
        limit = web.rate_limit if web is not None else None
        self.limiter = TokenBucket(limit) if limit is not None else None
        self.headers = list(web.headers) if web is not None else []

    def wrap(
        self, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
    ) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
        if self.auth is None and self.limiter is None and not self.headers:
            return app

        def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            if environ.get("PATH_INFO", "") in PROBES:
                return app(environ, start_response)

            def with_headers(status: str, headers: list[tuple[str, str]]) -> Any:
                return start_response(status, [*headers, *self.headers])

            if self.limiter is not None and not self.limiter.allow():
                with_headers("429 Too Many Requests", [("Content-Type", "text/plain")])
                return [b"too many requests\n"]
            if self.auth is not None and not self.auth.check(environ.get("HTTP_AUTHORIZATION")):
                challenge = ("WWW-Authenticate", 'Basic realm="burstscope"')
                with_headers("401 Unauthorized", [("Content-Type", "text/plain"), challenge])
                return [b"unauthorized\n"]
            return app(environ, with_headers)

        return guarded


def router(
    registry: CollectorRegistry,
    ready: Callable[[], bool] | None = None,
    guard: Guard | None = None,
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI app: /metrics, the index and the probes, behind ``guard``."""
    app = _paths(SharedExposition(registry), ready or (lambda: True))
    return guard.wrap(app) if guard is not None else app


def _paths(
    exposition: SharedExposition, ready: Callable[[], bool]
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/metrics", "/", *PROBES):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: try /metrics\n"]
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b"use GET\n"]
        if path == "/metrics":
            params = parse_qs(environ.get("QUERY_STRING", ""))
            compress = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
            body, content_type = exposition.render(
                environ.get("HTTP_ACCEPT"), params.get("name[]", ()), compress
            )
            headers = [("Content-Type", content_type)]
            if compress:
                headers.append(("Content-Encoding", "gzip"))
            start_response("200 OK", headers)
            return [body]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [_INDEX]
        text = [("Content-Type", "text/plain; charset=utf-8")]
        if path == "/-/healthy":
            start_response("200 OK", text)
            return [b"burstscope is healthy.\n"]
        if ready():
            start_response("200 OK", text)
            return [b"burstscope is ready.\n"]
        start_response("503 Service Unavailable", text)
        return [b"burstscope is not ready: no sample read and exported yet.\n"]

    return app


class _HardenedServer(ThreadingWSGIServer):
    """One thread per connection, at most max_connections, TLS handshakes in that thread.

    At the cap, the oldest connection that has not sent a request line yet is shut down to
    make room, so idle or silent connections can never keep a scrape out; only when every
    connection is an active request is a new one refused (503 over HTTP).
    """

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True
    tls: ssl.SSLContext | None = None
    client_allowed_sans: tuple[str, ...] = ()  # the web config's tls_server_config
    max_connections = MAX_CONNECTIONS
    handshake_seconds = HANDSHAKE_SECONDS

    def server_activate(self) -> None:
        self._guard = threading.Lock()
        self._idle: dict[Any, None] = {}  # accepted, no request line yet; oldest first
        self._open = 0
        self.refused_connections = 0
        self.evicted_connections = 0
        self.failed_handshakes = 0
        super().server_activate()

    def get_request(self) -> tuple[Any, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                # Out of descriptors: the pending connection stays in the backlog and the
                # socket stays readable; pause instead of spinning on accept().
                time.sleep(0.05)
            raise

    def mark_active(self, connection: Any) -> None:
        with self._guard:
            self._idle.pop(connection, None)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._guard:
            victim = None
            if self._open >= self.max_connections and self._idle:
                victim = next(iter(self._idle))
                del self._idle[victim]
                self.evicted_connections += 1
            elif self._open >= self.max_connections:
                self.refused_connections += 1
                victim = request
            if victim is not request:
                self._open += 1
                self._idle[request] = None
        if victim is not None:
            if victim is request and self.tls is None:
                with contextlib.suppress(OSError):
                    request.setblocking(False)
                    request.send(_BUSY)
            # Wakes the victim's thread from recv(); it then closes and frees its slot.
            with contextlib.suppress(OSError):
                victim.shutdown(socket.SHUT_RDWR)
            if victim is request:
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def _release(self, request: Any) -> None:
        with self._guard:
            self._idle.pop(request, None)
            self._open -= 1

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        accepted = request
        try:
            if self.tls is not None:
                request.settimeout(self.handshake_seconds)
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    self.failed_handshakes += 1  # silent, slow or not TLS at all
                    self.shutdown_request(request)
                    return
                allowed = self.client_allowed_sans
                if allowed and not san_allowed(request.getpeercert() or {}, allowed):
                    self.failed_handshakes += 1  # verified, but not one of the names allowed
                    self.shutdown_request(request)
                    return
                with self._guard:  # the TLS socket is the one the handler will see
                    if accepted in self._idle:
                        del self._idle[accepted]
                        self._idle[request] = None
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)
            if request is not accepted:
                self._release_alias(accepted)

    def _release_alias(self, accepted: Any) -> None:
        with self._guard:
            self._idle.pop(accepted, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up or timed out is not the agent's error


class MetricsServer:
    """Serves the router in a daemon thread; close() stops it.

    ``web`` is the exporter-toolkit web configuration (TLS, basic auth, headers, rate
    limit); ``ready`` answers /-/ready (always ready when None).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        listen: str,
        web: WebConfig | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        host, port = parse_listen(listen)
        context = None
        if web is not None and web.tls is not None:
            try:
                context = server_context(web.tls, web.path or "--tls-cert")
            except WebConfigError as exc:
                raise HttpError(str(exc)) from None

        class Server(_HardenedServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        Server.tls = context
        if web is not None and web.tls is not None:
            Server.client_allowed_sans = web.tls.client_allowed_sans
        self.guard = Guard(web)
        try:
            self._httpd = make_server(
                host or "0.0.0.0",
                port,
                router(registry, ready, self.guard),
                Server,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            raise HttpError(f"cannot listen on {listen}: {exc.strerror}") from None
        self.port = self._httpd.server_port
        self.scheme = "https" if context is not None else "http"
        # What was really bound, for the log: ":PORT" is every IPv4 interface (0.0.0.0),
        # port 0 the port the kernel chose.
        bound = str(self._httpd.server_address[0])
        self.address = f"[{bound}]:{self.port}" if ":" in bound else f"{bound}:{self.port}"
        self._thread = threading.Thread(target=self._serve, name="burstscope-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        name_os_thread()
        self._httpd.serve_forever()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
