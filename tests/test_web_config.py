"""--web.config.file (exporter-toolkit's format): parsing, every bad file, basic auth and its
cache, TLS and client certificates, the probes, and a real Prometheus scraping through it."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Gauge

from burstscope.agent import _restart_only
from burstscope.collector.config import ConfigError, parse_config
from burstscope.collector.http import HttpError, MetricsServer
from burstscope.collector.web_config import (
    BasicAuth,
    RateLimit,
    TlsServerConfig,
    TokenBucket,
    WebConfig,
    WebConfigError,
    from_tls_flags,
    load_web_config,
    parse_go_duration,
    parse_web_config,
    server_context,
)
from burstscope.testing import simulated_fleet
from burstscope.testing.emulated_node import agent_settings, running_agent
from burstscope.testing.processes import free_port, wait_for, wait_until
from tests.conftest import SYSFS, require_binary
from tests.test_agent import make_certificates
from tests.test_cli_core import assert_usage_error, burstscope

# Cost 4, bcrypt's least: the tests count checks rather than time them.
RIGHT = bcrypt.hashpw(b"right", bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_binary("openssl")
    return make_certificates(tmp_path_factory.mktemp("certs"))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the file --------------------------------------------------------------------------------


def test_a_full_file_parses_into_its_values() -> None:
    text = f"""
tls_server_config:
  cert_file: server.pem
  key_file: server-key.pem
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.pem
  client_allowed_sans: [prometheus.example]
  min_version: TLS13
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: false
  curve_preferences: [X25519]
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: '{RIGHT}'
rate_limit:
  interval: 100ms
  burst: 20
"""
    assert parse_web_config(text, "web.yml") == WebConfig(
        path="web.yml",
        tls=TlsServerConfig(
            cert_file="server.pem",
            key_file="server-key.pem",
            client_ca_file="ca.pem",
            client_auth_type="RequireAndVerifyClientCert",
            client_allowed_sans=("prometheus.example",),
            min_version="TLS13",
            cipher_suites=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",),
            prefer_server_cipher_suites=False,
            curve_preferences=("X25519",),
        ),
        users=(("prometheus", RIGHT),),
        headers=(
            ("X-Frame-Options", "deny"),
            ("Strict-Transport-Security", "max-age=31536000"),
        ),
        http2=False,
        rate_limit=RateLimit(0.1, 20),
    )


@pytest.mark.parametrize(
    "text",
    ["", "tls_server_config: {}\n", "basic_auth_users: {}\nrate_limit: {interval: 0}\n"],
)
def test_an_empty_file_or_section_serves_plain_http_without_auth(text: str) -> None:
    assert parse_web_config(text, "web.yml") == WebConfig(path="web.yml")


def test_the_tls_flags_are_a_tls_server_config() -> None:
    assert from_tls_flags("c.pem", "k.pem", "ca.pem") == WebConfig(
        tls=TlsServerConfig(
            "c.pem", "k.pem", client_ca_file="ca.pem", client_auth_type="RequireAndVerifyClientCert"
        )
    )


TLS = "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: [1, 2\n", "web.yml: not valid YAML (line 2)"),
        ("- a\n", "the file must be a mapping"),
        ("tls_config: {}\n", "unknown key tls_config (known: tls_server_config,"),
        (TLS + "  client_ca: x\n  client_ca_file: y\n", "exclude each other"),
        (TLS + "  ca_file: x\n", "unknown key tls_server_config.ca_file"),
        ("tls_server_config:\n  key_file: k.pem\n", "cert_file (or cert) is missing"),
        ("tls_server_config:\n  cert_file: c.pem\n", "key_file (or key) is missing"),
        (TLS + "  client_auth_type: Always\n", "'Always' is not one of NoClientCert,"),
        (TLS + "  client_auth_type: RequireAnyClientCert\n", "RequireAnyClientCert is not supp"),
        (TLS + "  client_ca_file: ca.pem\n", "never checks a client certificate"),
        (TLS + "  client_auth_type: VerifyClientCertIfGiven\n", "needs client_ca_file"),
        (
            TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.pem\n"
            "  client_allowed_sans: [a]\n",
            "client_allowed_sans needs client_auth_type RequireAndVerifyClientCert",
        ),
        (TLS + "  min_version: TLS14\n", "min_version 'TLS14' is not one of TLS10,"),
        (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version is above max"),
        (TLS + "  cipher_suites: [RC4]\n", "cipher_suites 'RC4' is not one of"),
        (TLS + "  curve_preferences: [X25519, CurveP256]\n", "takes one curve here"),
        (TLS + "  prefer_server_cipher_suites: yes please\n", "must be true or false"),
        ("basic_auth_users:\n  alice: secret\n", "basic_auth_users.alice is not a bcrypt hash"),
        ("basic_auth_users:\n  alice: '$2y$03$" + "a" * 53 + "'\n", "alice is not a bcrypt"),
        ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping"),
        ("http_server_config:\n  http3: true\n", "unknown key http_server_config.http3"),
        ("http_server_config:\n  headers:\n    Server: x\n", "headers.Server cannot be set"),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "X-Frame-Options must be one of deny, sameorigin",
        ),
        ("rate_limit:\n  interval: fast\n  burst: 1\n", "rate_limit.interval 'fast' is not"),
        ("rate_limit:\n  interval: 1s\n  burst: -1\n", "rate_limit.burst must be a whole"),
        ("rate_limit:\n  interval: 1s\n", "burst 0 would refuse every request"),
    ],
)
def test_a_bad_file_names_the_key(text: str, fragment: str) -> None:
    with pytest.raises(WebConfigError) as raised:
        parse_web_config(text, "web.yml")
    message = str(raised.value)
    assert message.startswith("web.yml: ") and fragment in message and "\n" not in message


@pytest.mark.parametrize(
    ("text", "seconds"), [("0", 0.0), ("1s", 1.0), ("250ms", 0.25), ("1m30s", 90.0)]
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == seconds


def test_missing_or_mismatched_tls_files_fail_at_load(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: /k.pem\n")
    with pytest.raises(WebConfigError, match=r"cannot load TLS files \(/nonexistent.pem"):
        load_web_config(str(web))
    web.write_text(
        f"tls_server_config:\n  cert_file: {certs['server']}\n  key_file: {certs['client-key']}\n"
    )
    with pytest.raises(WebConfigError, match="cannot load TLS files"):
        load_web_config(str(web))


def test_inline_pem_and_cipher_suites_build_a_context(certs: dict[str, Path]) -> None:
    tls = TlsServerConfig(
        cert=certs["server"].read_text(),
        key=certs["server-key"].read_text(),
        client_ca=certs["ca"].read_text(),
        client_auth_type="VerifyClientCertIfGiven",
        max_version="TLS12",
        cipher_suites=("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",),
    )
    context = server_context(tls)
    assert context.verify_mode == ssl.CERT_OPTIONAL
    names = {cipher["name"] for cipher in context.get_ciphers() if cipher["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-RSA-AES256-GCM-SHA384"}


# -- the command line and the configuration file ---------------------------------------------

AGENT = ["agent", "--source", "netdev:lo", "--line-rate", "1"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (None, "cannot read: No such file or directory"),
        ("a: [", "not valid YAML"),
        ("basic_auth: {}\n", "unknown key basic_auth"),
        ("basic_auth_users:\n  alice: plain\n", "alice is not a bcrypt hash"),
        ("tls_server_config:\n  cert_file: /none.pem\n  key_file: /none.pem\n", "cannot load TLS"),
    ],
)
def test_a_bad_file_stops_the_agent_with_one_line(
    tmp_path: Path, text: str | None, fragment: str
) -> None:
    web = tmp_path / "web.yml"
    if text is not None:
        web.write_text(text)
    assert_usage_error(burstscope(*AGENT, "--web.config.file", str(web)), str(web), fragment)


def test_the_web_config_and_the_tls_flags_exclude_each_other(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("")
    result = burstscope(*AGENT, "--web.config.file", str(web), "--tls-cert", str(web))
    assert_usage_error(result, "--web.config.file and --tls-cert/--tls-key/--tls-client-ca")


def test_the_configuration_file_takes_one_or_the_other(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("")
    assert parse_config(f"[listen]\nweb_config_file = '{web}'").get(
        "listen", "web_config_file"
    ) == str(web)
    both = f"[listen]\nweb_config_file = '{web}'\ntls_cert = '{web}'\ntls_key = '{web}'"
    with pytest.raises(ConfigError, match=r"web_config_file and listen\.tls_\* exclude each other"):
        parse_config(both, "agent.toml")


def test_check_config_checks_the_web_configuration(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  alice: plain\n")
    config = tmp_path / "agent.toml"
    config.write_text(
        '[source]\nspec = "netdev:lo"\nline_rate_gbits = 1\n'
        f"[listen]\nweb_config_file = '{web}'\n"
    )
    result = burstscope("agent", "--check-config", str(config))
    assert_usage_error(result, f"{web}: basic_auth_users.alice is not a bcrypt hash")


def test_a_changed_web_configuration_needs_a_restart(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("")
    arguments = ["--include", "mlx5_0", "--sysfs-root", str(SYSFS), "--web.config.file", str(web)]
    before = _restart_only(agent_settings(arguments))
    web.write_text(f"basic_auth_users:\n  prometheus: '{RIGHT}'\n")
    after = _restart_only(agent_settings(arguments))
    assert [key for key in before if before[key] != after[key]] == [
        "listen TLS and web configuration"
    ]


# -- basic auth ------------------------------------------------------------------------------


def test_a_verdict_is_cached_so_a_second_scrape_runs_no_bcrypt() -> None:
    auth = BasicAuth((("prometheus", RIGHT),))
    assert auth.check(basic("prometheus", "right"))
    assert auth.check(basic("prometheus", "right"))
    assert auth.bcrypt_checks == 1
    assert not auth.check(basic("prometheus", "wrong"))
    assert not auth.check(basic("prometheus", "wrong"))
    assert auth.bcrypt_checks == 2
    # An unknown user costs a check too (timing tells no names), and is never let in.
    assert not auth.check(basic("nobody", "right"))
    assert auth.bcrypt_checks == 3
    # The password is kept nowhere: the cache holds HMACs under a secret of the process.
    assert b"right" not in repr(vars(auth)).encode() and "right" not in repr(vars(auth))


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer abc", "Basic !!!", "Basic " + base64.b64encode(b"no-colon").decode()],
)
def test_malformed_authorization_is_refused_without_bcrypt(header: str | None) -> None:
    auth = BasicAuth((("prometheus", RIGHT),))
    assert not auth.check(header)
    assert auth.bcrypt_checks == 0


def test_a_flood_of_wrong_passwords_cannot_evict_the_scraper() -> None:
    auth = BasicAuth((("prometheus", RIGHT),), cache_size=4)
    assert auth.check(basic("prometheus", "right"))
    for attempt in range(10):
        assert not auth.check(basic("prometheus", f"guess{attempt}"))
    checks = auth.bcrypt_checks
    assert auth.check(basic("prometheus", "right"))
    assert auth.bcrypt_checks == checks
    # Over 72 bytes, which bcrypt 5 refuses: a wrong password, not an error.
    assert not auth.check(basic("prometheus", "x" * 100))


def test_token_bucket() -> None:
    now = [0.0]
    bucket = TokenBucket(RateLimit(1.0, 2), clock=lambda: now[0])
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
    now[0] = 1.0
    assert [bucket.allow() for _ in range(2)] == [True, False]


# -- the server ------------------------------------------------------------------------------


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Gauge("burstscope_test_value", "a value", registry=registry).set(1)
    return registry


def get(
    server: MetricsServer,
    path: str,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes]:
    if context is None:
        connection: http.client.HTTPConnection = http.client.HTTPConnection(
            "127.0.0.1", server.port, timeout=5
        )
    else:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", server.port, timeout=5, context=context
        )
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_basic_auth_guards_every_path_but_the_probes(registry: CollectorRegistry) -> None:
    ready = threading.Event()
    web = parse_web_config(
        f"basic_auth_users:\n  prometheus: '{RIGHT}'\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n",
        "web.yml",
    )
    server = MetricsServer(registry, "127.0.0.1:0", web, ready=ready.is_set)
    try:
        status, headers, _ = get(server, "/metrics")
        assert (status, headers["WWW-Authenticate"]) == (401, 'Basic realm="burstscope"')
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert get(server, "/metrics", {"Authorization": basic("prometheus", "wrong")})[0] == 401
        assert get(server, "/", {"Authorization": basic("prometheus", "wrong")})[0] == 401
        status, headers, body = get(
            server, "/metrics", {"Authorization": basic("prometheus", "right")}
        )
        assert (status, headers["X-Content-Type-Options"]) == (200, "nosniff")
        assert b"burstscope_test_value 1.0" in body
        status, _, body = get(server, "/-/healthy")
        assert (status, body) == (200, b"burstscope is healthy.\n")
        assert get(server, "/-/ready")[0] == 503
        ready.set()
        assert get(server, "/-/ready")[2] == b"burstscope is ready.\n"
        assert server.guard.auth is not None and server.guard.auth.bcrypt_checks == 2
    finally:
        server.close()


def test_the_rate_limit_answers_429_and_spares_the_probes(registry: CollectorRegistry) -> None:
    web = parse_web_config("rate_limit:\n  interval: 1h\n  burst: 2\n", "web.yml")
    server = MetricsServer(registry, "127.0.0.1:0", web)
    try:
        assert [get(server, "/metrics")[0] for _ in range(3)] == [200, 200, 429]
        assert get(server, "/-/healthy")[0] == 200
    finally:
        server.close()


def tls_web(certs: dict[str, Path], auth_type: str, extra: str = "") -> WebConfig:
    return parse_web_config(
        f"tls_server_config:\n  cert_file: {certs['server']}\n  key_file: {certs['server-key']}\n"
        f"  client_ca_file: {certs['ca']}\n  client_auth_type: {auth_type}\n{extra}",
        "web.yml",
    )


def client(certs: dict[str, Path], with_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    if with_certificate:
        context.load_cert_chain(str(certs["client"]), str(certs["client-key"]))
    return context


def test_client_certificates_and_allowed_sans(
    registry: CollectorRegistry, certs: dict[str, Path]
) -> None:
    optional = MetricsServer(registry, "127.0.0.1:0", tls_web(certs, "VerifyClientCertIfGiven"))
    try:
        assert get(optional, "/metrics", context=client(certs, False))[0] == 200
        assert get(optional, "/metrics", context=client(certs, True))[0] == 200
    finally:
        optional.close()
    sans = "  client_allowed_sans: ['{}']\n"
    for allowed, served in (("127.0.0.1", True), ("prometheus.example", False)):
        web = tls_web(certs, "RequireAndVerifyClientCert", sans.format(allowed))
        server = MetricsServer(registry, "127.0.0.1:0", web)
        try:
            with pytest.raises((ssl.SSLError, OSError)):
                get(server, "/-/healthy", context=client(certs, False))
            if served:
                assert get(server, "/-/healthy", context=client(certs, True))[0] == 200
            else:
                with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
                    get(server, "/-/healthy", context=client(certs, True))
                assert wait_until(partial(refused_twice, server))
        finally:
            server.close()


def refused_twice(server: MetricsServer) -> bool:
    httpd: Any = server._httpd  # the hardened server counts what it refuses
    return int(httpd.failed_handshakes) >= 2


def test_a_bad_tls_file_given_directly_is_an_http_error(registry: CollectorRegistry) -> None:
    with pytest.raises(HttpError, match="--tls-cert: cannot load TLS files"):
        MetricsServer(registry, "127.0.0.1:0", from_tls_flags("/none.pem", "/none.pem", None))


# -- a real Prometheus scraping the agent through the web configuration ----------------------


@pytest.fixture(scope="module")
def agent_behind_web_config(
    certs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    web = tmp_path_factory.mktemp("web") / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {certs['server']}\n  key_file: {certs['server-key']}\n"
        f"  client_ca_file: {certs['ca']}\n  client_auth_type: RequireAndVerifyClientCert\n"
        f"basic_auth_users:\n  prometheus: '{RIGHT}'\n"
    )
    with running_agent(SYSFS, "--include", "mlx5_0", "--web.config.file", str(web)) as (
        agent,
        url,
    ):
        yield agent, urllib.parse.urlparse(url).netloc


def scrape_job(name: str, target: str, certs: dict[str, Path], password: str, cert: bool) -> str:
    tls = {"ca_file": str(certs["ca"])}
    if cert:
        tls.update(cert_file=str(certs["client"]), key_file=str(certs["client-key"]))
    job = {
        "job_name": name,
        "scheme": "https",
        "tls_config": tls,
        "basic_auth": {"username": "prometheus", "password": password},
        "static_configs": [{"targets": [target]}],
    }
    return json.dumps(job)


def test_prometheus_scrapes_through_tls_and_basic_auth(
    agent_behind_web_config: tuple[Any, str],
    certs: dict[str, Path],
    tmp_path: Path,
) -> None:
    binary = require_binary("prometheus")
    agent, target = agent_behind_web_config
    jobs = [
        scrape_job("right", target, certs, "right", cert=True),
        scrape_job("wrong", target, certs, "wrong", cert=True),
        scrape_job("no-certificate", target, certs, "right", cert=False),
    ]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: 500ms\nscrape_configs: [{', '.join(jobs)}]\n"  # JSON is YAML
    )
    try:
        with simulated_fleet.running_prometheus(
            binary, config, tmp_path / "data", free_port()
        ) as prometheus:

            def scrapes() -> dict[str, tuple[float, float]] | None:
                query = "count_over_time(up[1m])"
                counts = prometheus.get("/api/v1/query", query=query)["data"]["result"]
                ups = prometheus.get("/api/v1/query", query="up")["data"]["result"]
                up = {r["metric"]["job"]: float(r["value"][1]) for r in ups}
                seen = {r["metric"]["job"]: float(r["value"][1]) for r in counts}
                if len(seen) == 3 and min(seen.values()) >= 2:
                    return {job: (up[job], seen[job]) for job in up}
                return None

            found = wait_for(scrapes, 30, "two scrapes of every job")
            assert {job: up for job, (up, _) in found.items()} == {
                "right": 1.0,
                "wrong": 0.0,
                "no-certificate": 0.0,
            }
            targets = prometheus.get("/api/v1/targets")["data"]["activeTargets"]
            errors = {t["labels"]["job"]: t["lastError"] for t in targets}
            assert "401" in errors["wrong"], errors
            assert errors["right"] == ""
            # Two or more scrapes with each password, one bcrypt check for each.
            assert agent.server.guard.auth.bcrypt_checks == 2
    finally:
        shutil.rmtree(tmp_path / "data", ignore_errors=True)


def test_the_agent_probes_answer_without_the_password(
    agent_behind_web_config: tuple[Any, str], certs: dict[str, Path]
) -> None:
    agent, target = agent_behind_web_config
    assert wait_until(agent.pipeline.drained.is_set)
    context = client(certs, True)
    probes = (("/-/healthy", b"burstscope is healthy.\n"), ("/-/ready", b"burstscope is ready.\n"))
    for path, body in probes:
        connection = http.client.HTTPSConnection(target, timeout=5, context=context)
        connection.request("GET", path)
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, body)
        connection.close()
