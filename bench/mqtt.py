"""How fast a backlog drains after the broker returns: the publisher against a bare client.

Prints ONE JSON line. A local Mosquitto (Debian's, started here on a free loopback port,
no persistence) receives ``--messages`` burst-sized QoS 1 messages three times: from the
agent's publisher, spooled while it was away (memory spool, then the on-disk sqlite spool),
and from a bare aiomqtt client that publishes the same payloads awaiting each PUBACK (the
reference: the publisher also waits for each PUBACK, so that a broken connection resends
from the first unacknowledged message). Awaiting PUBACKs together is no faster here:
aiomqtt logs a warning for every call beyond ten pending, and paho holds 20 in flight.
The ratio reference time / publisher time is the figure; a lone rate on this shared
machine is not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burstscope.collector.mqtt.messages import Identity, encode
from burstscope.collector.mqtt.publisher import MqttPublisher
from burstscope.collector.mqtt.settings import build_settings
from burstscope.collector.mqtt.spool import open_spool
from burstscope.testing.processes import find_mosquitto, start_broker

PAYLOAD = {
    "kind": "burst",
    "host": "gpu-node-17",
    "device": "mlx5_3",
    "port": 1,
    "direction": "transmit",
    "start_ns": 1_700_000_000_123_000_000,
    "end_ns": 1_700_000_000_143_000_000,
    "duration_seconds": 0.02,
    "bytes": 987_654_321,
    "peak_utilization": 1.0,
    "mean_utilization": 0.97,
    "threshold": 0.5,
    "run": 1_700_000_000_000_000_000,
    "merged": 1,
}
TOPIC = "burstscope/gpu-node-17/mlx5_3/1/burst"


async def publisher_drain(port: int, messages: int, spool_dir: str | None) -> float:
    """Seconds from connecting to an empty spool, for a backlog of ``messages``."""
    settings = build_settings(f"mqtt://127.0.0.1:{port}", spool_dir=spool_dir)
    spool = open_spool(spool_dir, messages + 10)
    identity = Identity("gpu-node-17", 1, "bench", 0.0, (("mlx5_3", 1),), 0.5)
    publisher = MqttPublisher(settings, spool, identity)
    for _ in range(0, messages, 1000):
        publisher.enqueue([(TOPIC, PAYLOAD)] * 1000)
    began = time.perf_counter()
    async with publisher:
        while publisher.stats.spool_depth:
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - began
        publisher.closing.set()
    return elapsed


async def reference_drain(port: int, messages: int) -> float:
    import aiomqtt

    payload = encode({**PAYLOAD, "seq": 1})
    began = time.perf_counter()
    async with aiomqtt.Client("127.0.0.1", port) as client:
        for _ in range(messages):
            await client.publish(TOPIC, payload, qos=1)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line (the default)")
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "mqtt", "messages": args.messages}
    binary = find_mosquitto()
    if binary is None:
        result["skipped"] = "mosquitto is not installed (make test installs it as root)"
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as scratch:
        broker, port = start_broker(Path(scratch), binary)
        try:
            reference = asyncio.run(reference_drain(port, args.messages))
            memory = asyncio.run(publisher_drain(port, args.messages, None))
            disk = asyncio.run(publisher_drain(port, args.messages, str(Path(scratch) / "s")))
        finally:
            broker.kill()
            broker.wait()
    result.update(
        {
            "reference_messages_per_second": round(args.messages / reference),
            "memory_spool_messages_per_second": round(args.messages / memory),
            "disk_spool_messages_per_second": round(args.messages / disk),
            "memory_ratio_vs_reference": round(reference / memory, 3),
            "disk_ratio_vs_reference": round(reference / disk, 3),
        }
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
