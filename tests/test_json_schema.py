"""Every JSON output says which shape it has: discover, report, capture and events."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from burstscope.capture.pcap import pcap_bytes
from tests.conftest import SYSFS
from tests.test_capture import mixed_frames
from tests.test_mqtt_broker import Broker, Subscriber


def burstscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "burstscope", *args], capture_output=True, text=True, timeout=120
    )


def test_discover_json_has_schema_version_2() -> None:
    """2: ports without a byte counter are under not_sampled (0.1.0 had them in skipped)."""
    result = burstscope("discover", "--sysfs-root", str(SYSFS), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema_version"] == 2
    assert [p["device"] for p in document["not_sampled"]] == ["mlx5_3"]


def test_report_json_has_schema_version_7(tmp_path: Path) -> None:
    """3: jobs, the trace's job table grouped by job ([] for a trace without one); 4:
    collectives, the records joined to the samples ([] for a trace without records); 6:
    rails, the node's training rails side by side (one node here); 7: the fleet's
    stragglers (with two traces or more: tests/test_fleet_report.py)."""
    trace = tmp_path / "trace"
    simulated = burstscope("simulate", "--duration", "1", "-o", str(trace))
    assert simulated.returncode == 0, simulated.stderr
    result = burstscope("report", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema_version"] == 7 and document["jobs"] == []
    assert "fleet" not in document
    assert document["collectives"] == []
    assert [len(node["rails"]) for node in document["rails"]] == [8]


def test_capture_json_has_schema_version_1(tmp_path: Path) -> None:
    pcap = tmp_path / "mixed.pcap"
    pcap.write_bytes(pcap_bytes(mixed_frames(50, seed=1)))
    result = burstscope("capture", "--pcap", str(pcap), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["schema_version"] == 1


async def _publish_status(port: int) -> None:
    import aiomqtt

    async with aiomqtt.Client("127.0.0.1", port) as client:
        status = {"host": "node-1", "online": True, "version": "0"}
        await client.publish("burstscope/node-1/status", json.dumps(status), qos=1, retain=True)


def test_events_json_lines_have_schema_version_1(tmp_path: Path) -> None:
    broker = Broker(tmp_path)  # skips without mosquitto, fails under the integration switch
    broker.start()
    subscriber: Subscriber | None = None
    try:
        asyncio.run(_publish_status(broker.port))
        running = subscriber = Subscriber(f"mqtt://127.0.0.1:{broker.port}")
        assert running.wait_for(lambda: bool(running.lines), 15), running.stderr_text()
        (line,) = running.lines  # the Subscriber takes each line's schema_version out
        assert line["host"] == "node-1" and running.schema_versions == {1}
    finally:
        if subscriber is not None:
            subscriber.stop()
        broker.kill()
