"""The /metrics endpoint: prometheus-client's WSGI app behind a router, optionally with (m)TLS.

prometheus-client's own ``start_http_server`` answers every path with metrics; an
exporter should answer 404 for unknown paths, so the app is wrapped in a small router
and served with the library's threading WSGI server.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

# Registered nowhere yet; chosen from the unassigned range of the Prometheus default port
# allocations wiki so it does not clash with node_exporter (9100) or dcgm-exporter (9400).
DEFAULT_PORT = 9847
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

_INDEX = b"""<html><head><title>burstscope</title></head><body>
<h1>burstscope</h1><p><a href="/metrics">/metrics</a></p></body></html>
"""

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class HttpError(Exception):
    """The endpoint cannot be served: bad address, port in use, unreadable TLS files."""


@dataclass(frozen=True, slots=True)
class TlsConfig:
    certfile: str
    keyfile: str
    client_cafile: str | None = None  # set: clients must present a certificate it signed


def parse_listen(text: str) -> tuple[str, int]:
    """ "ADDR:PORT", "[v6]:PORT" or ":PORT" (all interfaces) into a (host, port) pair."""
    host, separator, port_text = text.rpartition(":")
    if not separator or not port_text.isdigit() or not 0 < int(port_text) < 65536:
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


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.certfile, tls.keyfile)
        if tls.client_cafile is not None:
            context.load_verify_locations(tls.client_cafile)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f for f in (tls.certfile, tls.keyfile, tls.client_cafile) if f)
        raise HttpError(f"cannot load TLS files ({files}): {exc}") from None
    return context


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: scrapes every second would drown the journal."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def router(
    registry: CollectorRegistry,
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            result: Iterable[bytes] = metrics(environ, start_response)
            return result
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [_INDEX]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics\n"]

    return app


class MetricsServer:
    """Serves the router in a daemon thread; close() stops it."""

    def __init__(
        self, registry: CollectorRegistry, listen: str, tls: TlsConfig | None = None
    ) -> None:
        host, port = parse_listen(listen)
        context = tls_context(tls) if tls is not None else None

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        try:
            self._httpd = make_server(
                host or "0.0.0.0", port, router(registry), Server, handler_class=_QuietHandler
            )
        except OSError as exc:
            raise HttpError(f"cannot listen on {listen}: {exc.strerror}") from None
        if context is not None:
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_port
        self.scheme = "https" if context is not None else "http"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="burstscope-http", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
