"""The pipeline's drain: callers beside the pipeline thread wait for it, never race it."""

from __future__ import annotations

import threading

from burstscope.collector.pipeline import Pipeline
from burstscope.collector.sources import SourceOptions, build_source
from burstscope.testing.processes import wait_until


def test_drains_from_other_threads_wait_their_turn() -> None:
    source = build_source("netdev:lo", SourceOptions(line_rate_bytes_per_second=1_250_000_000))
    pipeline = Pipeline(source)
    failures: list[BaseException] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            try:
                pipeline.drain()  # as a benchmark closing a phase does
            except BaseException as exc:  # a race shows as "timestamps go backwards"
                failures.append(exc)
                return

    pipeline.start()
    try:
        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for thread in threads:
            thread.start()
        # Hammer for as long as it takes the sampler to tick 600 times, however busy the CPU.
        wait_until(lambda: pipeline.snapshot().health.ticks > 600 or bool(failures))
        stop.set()
        for thread in threads:
            thread.join(5)
        snapshot = pipeline.snapshot()
    finally:
        pipeline.close()
    assert failures == []
    (port,) = snapshot.ports
    assert port.directions["transmit"].live.samples > 500  # fed on, never raced
    assert snapshot.health.ticks > 500
