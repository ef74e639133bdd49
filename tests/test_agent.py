"""burstscope agent as a subprocess: serving, TLS, 404s, signals and every bad input."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from burstscope.testing.processes import (
    STOP_SECONDS,
    AgentProcess,
    fetch,
    main_thread_asleep,
    metric,
    other_threads,
    wait_until,
)
from tests.conftest import SYSFS
from tests.test_cli_core import assert_usage_error, burstscope


@pytest.fixture
def loopback_agent() -> Iterator[AgentProcess]:
    agent = AgentProcess("--source", "netdev:lo", "--line-rate", "10")
    yield agent
    agent.stop()


def test_serves_metrics_never_resets_and_404s(loopback_agent: AgentProcess) -> None:
    first = loopback_agent.wait_ready()
    ticks = "burstscope_sampler_ticks_total"
    count = 'burstscope_port_utilization_ratio_count{device="lo",direction="transmit",port="1"}'
    second = ""

    def advanced() -> bool:
        nonlocal second
        second = fetch(loopback_agent.url + "/metrics")
        return metric(second, count) > metric(first, count)

    assert wait_until(advanced)
    assert metric(second, ticks) > metric(first, ticks)
    assert metric(second, count) > metric(first, count) >= 0
    assert 'burstscope_port_line_rate_bytes_per_second{device="lo",port="1"} 1.25e+09' in first
    with pytest.raises(urllib.error.HTTPError) as missing:
        fetch(loopback_agent.url + "/favicon.ico")
    assert missing.value.code == 404
    assert "/metrics" in fetch(loopback_agent.url + "/")


def test_sigterm_stops_within_two_seconds(loopback_agent: AgentProcess) -> None:
    loopback_agent.wait_ready()
    started = time.monotonic()
    status = loopback_agent.stop()
    seconds = time.monotonic() - started
    stderr = loopback_agent.stderr
    assert status == 0, stderr
    assert seconds < STOP_SECONDS
    assert "stopped" in stderr


def test_sigterm_taken_by_another_thread_stops_it(loopback_agent: AgentProcess) -> None:
    """kill(2) hands SIGTERM to any thread of the agent that does not block it; given to one
    that is not the main thread (tgkill), the agent stops as fast. Before get_interruptibly
    the main thread slept on in its untimed wait: 60 s, then the test aborted it."""
    # The data counters appear after the first drain, past which the main thread's only
    # sleep is its wait for a signal (burstscope/agent.py serve).
    loopback_agent.scrape_when("burstscope_port_data_bytes_total{")
    assert wait_until(lambda: main_thread_asleep(loopback_agent.pid))
    threads = other_threads(loopback_agent.pid)
    assert threads, "the agent runs threads beside its main one"
    started = time.monotonic()
    status = loopback_agent.stop(thread=threads[0])
    assert status == 0, loopback_agent.stderr
    assert time.monotonic() - started < STOP_SECONDS
    assert "stopped" in loopback_agent.stderr


def test_a_source_failing_at_start_is_visible_in_health(sysfs_copy: Path) -> None:
    """Counters that turn unreadable right after discovery: /metrics still answers."""
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    try:
        counters = sysfs_copy / "class/infiniband/mlx5_0/ports/1/counters"
        agent.wait_ready()
        (counters / "port_xmit_data").write_text("N/A (no PMA)\n")
        failed = 'burstscope_port_failed_reads_total{device="mlx5_0",port="1"}'
        assert wait_until(lambda: metric(fetch(agent.url + "/metrics"), failed) > 0)
        body = fetch(agent.url + "/metrics")
        assert metric(body, "burstscope_sampler_up") == 1.0
    finally:
        agent.stop()


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, with openssl."""
    paths = {
        name: directory / f"{name}.pem"
        for name in ("ca", "ca-key", "server", "server-key", "client", "client-key")
    }

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        str(paths["ca-key"]),
        "-out",
        str(paths["ca"]),
    )
    for name in ("server", "client"):
        request = directory / f"{name}.csr"
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            str(paths[f"{name}-key"]),
            "-out",
            str(request),
        )
        extensions = directory / f"{name}.ext"
        extensions.write_text("subjectAltName=IP:127.0.0.1\n")
        run(
            "x509",
            "-req",
            "-in",
            str(request),
            "-CA",
            str(paths["ca"]),
            "-CAkey",
            str(paths["ca-key"]),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(extensions),
            "-out",
            str(paths[name]),
        )
    return paths


def test_tls_with_client_certificates(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    agent = AgentProcess(
        "--source",
        "netdev:lo",
        "--line-rate",
        "10",
        "--tls-cert",
        str(certs["server"]),
        "--tls-key",
        str(certs["server-key"]),
        "--tls-client-ca",
        str(certs["ca"]),
        scheme="https",
    )
    try:
        trusted = ssl.create_default_context(cafile=str(certs["ca"]))
        trusted.load_cert_chain(str(certs["client"]), str(certs["client-key"]))
        agent.wait_ready(trusted)
        # The data counters appear with their first reading (the first drain).
        agent.wait_value("burstscope_port_data_bytes_total{", lambda _: True, context=trusted)
        anonymous = ssl.create_default_context(cafile=str(certs["ca"]))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            fetch(f"https://127.0.0.1:{agent.port}/metrics", anonymous)
    finally:
        agent.stop()


def test_port_in_use_is_one_line_and_status_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = burstscope(
            "agent", "--source", "netdev:lo", "--line-rate", "1", "--listen", f"127.0.0.1:{port}"
        )
    assert_usage_error(result, f"cannot listen on 127.0.0.1:{port}", "in use")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--listen", "localhost"], ["--listen 'localhost' is not ADDR:PORT"]),
        (["--listen", "example.org:80"], ["is not an IP address"]),
        (
            ["--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"],
            ["cannot load TLS files"],
        ),
        (["--tls-cert", "/nonexistent/cert.pem"], ["--tls-cert and --tls-key go together"]),
        (["--config", "/nonexistent/agent.toml"], ["/nonexistent/agent.toml: cannot read"]),
        (["--tls-client-ca", "/nonexistent/ca.pem"], ["--tls-client-ca needs --tls-cert"]),
        (["--record", "/proc/burstscope-recordings"], ["cannot record to"]),
        (["--interval", "5us"], ["interval '5us' is outside"]),
    ],
)
def test_bad_agent_input(args: list[str], fragments: list[str]) -> None:
    result = burstscope("agent", "--source", "netdev:lo", "--line-rate", "1", *args)
    assert_usage_error(result, *fragments)


def test_unknown_line_rate_is_sampled_and_says_how_to_set_it() -> None:
    """lo has no speed: the agent samples it all the same and says how to give a rate."""
    agent = AgentProcess("--source", "netdev:lo")
    try:
        # The data counters appear with their first reading (the first drain).
        body = agent.scrape_when(
            'burstscope_port_data_bytes_total{device="lo",direction="transmit"'
        )
        assert 'burstscope_port_utilization_ratio_count{device="lo"' not in body
    finally:
        status, stderr = agent.stop(), agent.stderr
    assert status == 0
    assert "lo port 1: line rate unknown" in stderr
    assert "--line-rate-for DEVICE=GBITS" in stderr


def test_check_config(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        '[source]\nspec = "netdev:lo"\nline_rate_gbits = 10\n[thresholds]\nsaturated = 0.95\n'
    )
    result = burstscope("agent", "--check-config", str(good))
    assert result.returncode == 0 and "configuration is valid" in result.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[thresholds]\nsaturated = 2\n")
    assert_usage_error(
        burstscope("agent", "--check-config", str(bad)),
        f"{bad}: thresholds.saturated must be in (0, 1], not 2",
    )


def test_config_file_supplies_the_source(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(f'[source]\nspec = "sysfs"\nsysfs_root = "{SYSFS}"\ninclude = "mlx5_0"\n')
    agent = AgentProcess("--config", str(config))
    try:
        body = agent.wait_ready()
        assert 'burstscope_port_line_rate_bytes_per_second{device="mlx5_0",port="1"} 5e+10' in body
        assert 'device="mlx5_1"' not in body
    finally:
        agent.stop()
    assert os.path.exists(config)


def test_agent_records_each_run_into_its_own_trace(tmp_path: Path) -> None:
    recordings = tmp_path / "recordings"
    agent = AgentProcess("--source", "netdev:lo", "--line-rate", "10", "--record", str(recordings))
    agent.wait_ready()
    ticks = "burstscope_sampler_ticks_total "
    assert wait_until(lambda: metric(fetch(agent.url + "/metrics"), ticks) >= 1000)
    status, stderr = agent.stop(), agent.stderr
    assert status == 0, stderr
    (run,) = list(recordings.iterdir())
    import pyarrow.dataset as ds

    rows = ds.dataset(run).to_table().num_rows
    assert rows >= 800  # closed and readable after SIGTERM
