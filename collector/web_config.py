"""The exporter-toolkit web configuration (``--web.config.file``): TLS, basic auth, headers.

The format is the one node_exporter and every exporter built on prometheus/exporter-toolkit
read, documented in
https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md, so an
operator reuses the file the node already has. Every key of that document is read; where
Python's ``ssl`` module cannot do what Go's ``crypto/tls`` does, the key is refused at start
with one line saying so, never silently ignored (a weaker TLS than the file asks for is
worse than no start):

- ``client_auth_type: RequireAnyClientCert`` (OpenSSL cannot demand a certificate it does not
  verify) is refused; ``RequestClientCert`` asks for nothing, which grants the same access;
- ``curve_preferences`` takes one curve (``SSLContext.set_ecdh_curve``);
- ``cipher_suites`` takes the TLS 1.2 suites Go's ``tls.CipherSuites()`` lists, by their
  IANA names, mapped to OpenSSL's through the suites' IANA numbers;
- ``http_server_config.http2`` is accepted and has no effect: the agent speaks HTTP/1.x,
  which Prometheus falls back to through ALPN.

The agent's ``--tls-cert``/``--tls-key``/``--tls-client-ca`` flags are implemented by this
module (``from_tls_flags``): they are shorthand for a ``tls_server_config`` with
``client_auth_type: RequireAndVerifyClientCert`` when a client CA is given.

Unlike exporter-toolkit, which re-reads the file on every request, the file is read once at
start (a bad file is a usage error there, not a 500 on every scrape); a change needs a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class WebConfigError(Exception):
    """One line: the file, the key and what is wrong with it."""


CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    # Go asks for a certificate and ignores it: no access depends on it, so asking for
    # none serves the same clients the same way.
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's tls.CipherSuites() for TLS 1.2 (https://pkg.go.dev/crypto/tls#pkg-constants) by IANA
# number (RFC 5289, RFC 4492, RFC 7905): OpenSSL names them differently, numbers are shared.
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": 0xC009,
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": 0xC00A,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": 0xC013,
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": 0xC014,
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": 0xC02B,
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": 0xC02C,
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": 0xC02F,
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": 0xC030,
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA8,
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA9,
}
# Go's tls.CurveID names -> OpenSSL's.
CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}
# exporter-toolkit's web/handler.go: the headers a file may set, and their allowed values.
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
# What Go's bcrypt.Cost accepts: versions 2a, 2b, 2y; cost 4..31; 22 salt + 31 hash chars.
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True, slots=True)
class TlsServerConfig:
    """``tls_server_config``: files by path, or PEM text inline (``cert``, ``key``)."""

    cert_file: str | None = None
    key_file: str | None = None
    cert: str | None = None
    key: str | None = field(default=None, repr=False)
    client_ca_file: str | None = None
    client_ca: str | None = None
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``rate_limit``: a token bucket, one token per ``interval_seconds``, ``burst`` deep."""

    interval_seconds: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    """The parsed file; ``tls`` None serves plain HTTP (basic auth may still apply)."""

    path: str | None = None
    tls: TlsServerConfig | None = None
    users: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # name, bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    http2: bool = True
    rate_limit: RateLimit | None = None


def from_tls_flags(cert: str, key: str, client_ca: str | None) -> WebConfig:
    """What ``--tls-cert``, ``--tls-key`` and ``--tls-client-ca`` mean, as a web config."""
    auth = "RequireAndVerifyClientCert" if client_ca is not None else "NoClientCert"
    return WebConfig(
        tls=TlsServerConfig(cert, key, client_ca_file=client_ca, client_auth_type=auth)
    )


def load_web_config(path: str) -> WebConfig:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise WebConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"{path}: not a text file") from None
    config = parse_web_config(text, path)
    if config.tls is not None:
        server_context(config.tls, path)  # a missing or mismatched file fails here, at start
    return config


def parse_web_config(text: str, path: str = "<web config>") -> WebConfig:
    """The file's values, each checked; WebConfigError names the file and the key."""
    import yaml  # the [web] extra: only an agent given a web configuration needs it

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise WebConfigError(f"{path}: not valid YAML{line}: {_first_line(exc)}") from None
    raw = {} if raw is None else raw
    top = _table(raw, path, "the file")
    sections = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
    _known(top, path, "", sections)
    tls = _tls(top.get("tls_server_config"), path)
    http = _table(top.get("http_server_config") or {}, path, "http_server_config")
    _known(http, path, "http_server_config.", ("http2", "headers"))
    return WebConfig(
        path=path,
        tls=tls,
        users=_users(top.get("basic_auth_users"), path),
        headers=_headers(http.get("headers"), path),
        http2=_bool(http.get("http2", True), path, "http_server_config.http2"),
        rate_limit=_rate_limit(top.get("rate_limit"), path),
    )


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _table(value: Any, path: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise WebConfigError(f"{path}: {where} must be a mapping of names to values")
    return value


def _known(table: dict[str, Any], path: str, prefix: str, known: tuple[str, ...]) -> None:
    for key in table:
        if key not in known:
            raise WebConfigError(f"{path}: unknown key {prefix}{key} (known: {', '.join(known)})")


def _string(value: Any, path: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{path}: {key} must be a non-empty string")
    return value


def _bool(value: Any, path: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise WebConfigError(f"{path}: {key} must be true or false, not {value!r}")
    return value


def _strings(value: Any, path: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise WebConfigError(f"{path}: {key} must be a list of strings")
    return tuple(value)


def _tls(value: Any, path: str) -> TlsServerConfig | None:
    if value is None:
        return None
    table = _table(value, path, "tls_server_config")
    _known(table, path, "tls_server_config.", tuple(TlsServerConfig.__dataclass_fields__))
    key = "tls_server_config."
    strings = {
        name: _string(table[name], path, key + name)
        for name in ("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca")
        if table.get(name) is not None
    }
    auth = table.get("client_auth_type") or "NoClientCert"
    if not isinstance(auth, str):
        raise WebConfigError(f"{path}: {key}client_auth_type must be a string")
    if not strings and auth == "NoClientCert":
        return None  # exporter-toolkit: a section with no certificate and no policy is plain HTTP
    if auth not in CLIENT_AUTH_TYPES:
        raise WebConfigError(
            f"{path}: {key}client_auth_type {auth!r} is not one of {', '.join(CLIENT_AUTH_TYPES)}"
        )
    if auth == "RequireAnyClientCert":
        raise WebConfigError(
            f"{path}: {key}client_auth_type RequireAnyClientCert is not supported (OpenSSL "
            "cannot require a certificate it does not verify): use RequireAndVerifyClientCert"
        )
    for pair in (("cert_file", "cert"), ("key_file", "key"), ("client_ca_file", "client_ca")):
        if all(name in strings for name in pair):
            raise WebConfigError(f"{path}: {key}{pair[0]} and {key}{pair[1]} exclude each other")
    if "cert_file" not in strings and "cert" not in strings:
        raise WebConfigError(f"{path}: {key}cert_file (or cert) is missing")
    if "key_file" not in strings and "key" not in strings:
        raise WebConfigError(f"{path}: {key}key_file (or key) is missing")
    has_ca = "client_ca_file" in strings or "client_ca" in strings
    verifies = auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
    if has_ca and not verifies:
        raise WebConfigError(
            f"{path}: {key}client_ca_file is set but client_auth_type {auth} never checks a "
            "client certificate against it: use RequireAndVerifyClientCert"
        )
    if verifies and not has_ca:
        raise WebConfigError(f"{path}: {key}client_auth_type {auth} needs client_ca_file")
    sans = _strings(table.get("client_allowed_sans") or [], path, key + "client_allowed_sans")
    if sans and auth != "RequireAndVerifyClientCert":
        raise WebConfigError(
            f"{path}: {key}client_allowed_sans needs client_auth_type RequireAndVerifyClientCert"
        )
    versions = []
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        version = table.get(name) or default
        if not isinstance(version, str) or version not in TLS_VERSIONS:
            raise WebConfigError(
                f"{path}: {key}{name} {version!r} is not one of {', '.join(TLS_VERSIONS)}"
            )
        versions.append(version)
    if TLS_VERSIONS[versions[0]] > TLS_VERSIONS[versions[1]]:
        raise WebConfigError(f"{path}: {key}min_version is above max_version")
    suites = _strings(table.get("cipher_suites") or [], path, key + "cipher_suites")
    for suite in suites:
        if suite not in CIPHER_SUITES:
            raise WebConfigError(
                f"{path}: {key}cipher_suites {suite!r} is not one of {', '.join(CIPHER_SUITES)}"
            )
    curves = _strings(table.get("curve_preferences") or [], path, key + "curve_preferences")
    if len(curves) > 1 or any(curve not in CURVES for curve in curves):
        raise WebConfigError(
            f"{path}: {key}curve_preferences takes one curve here (Python's ssl sets one), "
            f"one of {', '.join(CURVES)}"
        )
    prefer = _bool(
        table.get("prefer_server_cipher_suites", True), path, key + "prefer_server_cipher_suites"
    )
    return TlsServerConfig(
        **strings,
        client_auth_type=auth,
        client_allowed_sans=sans,
        min_version=versions[0],
        max_version=versions[1],
        cipher_suites=suites,
        prefer_server_cipher_suites=prefer,
        curve_preferences=curves,
    )


def _users(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    table = _table(value, path, "basic_auth_users")
    users = []
    for name, hashed in table.items():
        match = _BCRYPT.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise WebConfigError(
                f"{path}: basic_auth_users.{name} is not a bcrypt hash "
                "($2y$10$ and 53 characters, as htpasswd -nBC 10 writes)"
            )
        users.append((name, hashed))
    if users:
        try:
            import bcrypt  # noqa: F401  # the [web] extra
        except ImportError:
            raise WebConfigError(
                f"{path}: basic_auth_users needs the bcrypt package (pip install 'burstscope[web]')"
            ) from None
    return tuple(users)


def _headers(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    table = _table(value, path, "http_server_config.headers")
    headers = []
    for name, text in table.items():
        allowed = HEADERS.get(name)
        where = f"http_server_config.headers.{name}"
        if allowed is None:
            raise WebConfigError(f"{path}: {where} cannot be set (known: {', '.join(HEADERS)})")
        text = _string(text, path, where)
        if allowed and text not in allowed:
            raise WebConfigError(f"{path}: {where} must be one of {', '.join(allowed)}")
        headers.append((name, text))
    return tuple(headers)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Go's time.ParseDuration (what exporter-toolkit reads): "1s", "1m30s", "0"; seconds."""
    if text == "0":
        return 0.0
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"{text!r} is not a duration like 1s, 500ms or 1m30s")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _rate_limit(value: Any, path: str) -> RateLimit | None:
    if value is None:
        return None
    table = _table(value, path, "rate_limit")
    _known(table, path, "rate_limit.", ("interval", "burst"))
    try:
        interval = parse_go_duration(str(table.get("interval", "0")))
    except ValueError as exc:
        raise WebConfigError(f"{path}: rate_limit.interval {exc}") from None
    burst = table.get("burst", 0)
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
        raise WebConfigError(f"{path}: rate_limit.burst must be a whole number >= 0")
    if interval == 0:
        return None  # exporter-toolkit: an interval of 0 turns the limiter off
    if burst == 0:
        raise WebConfigError(f"{path}: rate_limit.burst 0 would refuse every request")
    return RateLimit(interval, burst)


def server_context(tls: TlsServerConfig, path: str = "--tls-cert") -> ssl.SSLContext:
    """The SSL context the file describes; WebConfigError if a file is missing or wrong."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version]
    files = ", ".join(f for f in (tls.cert_file, tls.key_file, tls.client_ca_file) if f)
    try:
        _load_chain(context, tls)
        if tls.client_ca_file is not None or tls.client_ca is not None:
            context.load_verify_locations(cafile=tls.client_ca_file, cadata=tls.client_ca)
        context.verify_mode = _VERIFY_MODES[tls.client_auth_type]
        if tls.cipher_suites:
            context.set_ciphers(_openssl_ciphers(context, tls.cipher_suites))
        if tls.curve_preferences:
            context.set_ecdh_curve(CURVES[tls.curve_preferences[0]])
    except (OSError, ssl.SSLError, ValueError) as exc:
        what = f" files ({files})" if files else ""
        raise WebConfigError(f"{path}: cannot load TLS{what}: {_first_line(exc)}") from None
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return context


def _load_chain(context: ssl.SSLContext, tls: TlsServerConfig) -> None:
    if tls.cert is None and tls.key is None:
        context.load_cert_chain(str(tls.cert_file), tls.key_file)
        return
    # load_cert_chain reads files only: inline PEM goes through a private file, removed at
    # once (mode 0600 in a 0700 directory of mkdtemp).
    with tempfile.TemporaryDirectory(prefix="burstscope-tls-") as private:
        paths = []
        pairs = ((tls.cert, tls.cert_file, "cert"), (tls.key, tls.key_file, "key"))
        for inline, given, name in pairs:
            if inline is None:
                paths.append(str(given))
                continue
            target = os.path.join(private, name)
            descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(inline)
            paths.append(target)
        context.load_cert_chain(paths[0], paths[1])


def _openssl_ciphers(context: ssl.SSLContext, suites: tuple[str, ...]) -> str:
    available = {cipher["id"] & 0xFFFF: cipher["name"] for cipher in context.get_ciphers()}
    missing = [suite for suite in suites if CIPHER_SUITES[suite] not in available]
    if missing:
        raise ValueError(f"this OpenSSL does not offer {', '.join(missing)}")
    return ":".join(available[CIPHER_SUITES[suite]] for suite in suites)


def san_allowed(peer: dict[str, Any], allowed: tuple[str, ...]) -> bool:
    """A verified client certificate's subjectAltName holds one of ``allowed`` exactly (DNS,
    IP, e-mail or URI, as exporter-toolkit's client_allowed_sans matches them)."""
    for kind, value in peer.get("subjectAltName", ()):
        if kind == "IP Address":
            # Python writes IPv6 SANs expanded and upper-case; Go's IP.String() compresses.
            try:
                value = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        if value in allowed:
            return True
    return False


class BasicAuth:
    """Checks ``Authorization: Basic`` against bcrypt hashes, remembering verdicts.

    A bcrypt check costs tens of milliseconds (about 60 ms at cost 10 here) against a
    scrape budget of 20 ms, so a verdict is cached under an HMAC of user, hash and
    password keyed by a secret of this process: the password is never kept, and the key
    cannot be recomputed from a memory dump without the secret. Successes and failures are
    cached apart (at most ``cache_size`` each, least recently used out), so a client that
    tries many wrong passwords cannot push the scraper's entry out. Checks run one at a
    time, as exporter-toolkit's do, so a flood costs the node one core at most.
    """

    # A bcrypt hash of a password nobody has: an unknown user costs a check too, so timing
    # does not tell which user names exist (exporter-toolkit does the same).
    _NOBODY = "$2b$10$VKqfBXWshKVUsIJI8Rb8De0jCSmyM7XxLAYMhNtJroG2o4mjw1NM2"

    def __init__(self, users: tuple[tuple[str, str], ...], cache_size: int = 64) -> None:
        import bcrypt

        self._checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw
        self._users = dict(users)
        self._secret = secrets.token_bytes(32)
        self._cache_size = cache_size
        self._verdicts: dict[bool, OrderedDict[bytes, None]] = {
            True: OrderedDict(),
            False: OrderedDict(),
        }
        self._lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()
        self.bcrypt_checks = 0

    def check(self, authorization: str | None) -> bool:
        """True when the header names a user of the file with the right password."""
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return False
        user, password = credentials
        known = user in self._users
        hashed = self._users.get(user, self._NOBODY)
        key = hmac.new(
            self._secret, b"\0".join((user.encode(), hashed.encode(), password)), hashlib.sha256
        ).digest()
        with self._lock:
            for verdict, cache in self._verdicts.items():
                if key in cache:
                    cache.move_to_end(key)
                    return verdict and known
        with self._bcrypt_lock:
            self.bcrypt_checks += 1
            try:
                matches = self._checkpw(password, hashed.encode())
            except ValueError:  # bcrypt 5 refuses passwords over 72 bytes: none can match
                matches = False
        verdict = matches and known
        with self._lock:
            cache = self._verdicts[verdict]
            cache[key] = None
            if len(cache) > self._cache_size:
                cache.popitem(last=False)
        return verdict


def _basic_credentials(authorization: str | None) -> tuple[str, bytes] | None:
    """RFC 7617: ``Basic base64(user ":" password)``; None when absent or malformed."""
    if authorization is None:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, separator, password = decoded.partition(b":")
    if not separator:
        return None
    try:
        return user.decode(), password
    except UnicodeDecodeError:
        return None


class TokenBucket:
    """``rate_limit``: ``burst`` requests at once, then one per ``interval_seconds``."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._tokens = float(limit.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            refill = (now - self._last) / self._limit.interval_seconds
            self._tokens = min(float(self._limit.burst), self._tokens + refill)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
