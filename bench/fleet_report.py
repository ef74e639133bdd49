"""A fleet's traces, one process against Dask: ``python bench/fleet_report.py --json``.

Generates ``--nodes`` simulated nodes of one job (``burstscope simulate --host``), each
``--seconds`` of 9 ports at 1 ms, then measures, in this run:
- bytes_per_row of the compact traces; writer CPU per row and reader rows per second of
  the compact encoding against the previous settings (timestamp order, zstd only) on the
  same rows;
- single_process_seconds: ``burstscope report --json`` over every trace;
- dask_seconds: the same with ``--workers W`` (a LocalCluster, started inside the timing),
  and dask_analysis_seconds on a cluster already up, with each worker's peak RSS;
- identical: the two JSON documents are equal byte for byte;
- a projection for 590 nodes x 1 hour from the measured cost per node-hour.
Targets (issue 18): bytes/row <= 4; writer CPU <= 1.2x and reader rows/s >= 1x the previous
settings; Dask <= 0.65x the single-process time; peak RSS per worker <= 1 GiB.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from burstscope.cluster import dask_cluster  # noqa: E402
from burstscope.report_model import analyze_paths  # noqa: E402
from collector.trace import read_samples  # noqa: E402
from collector.trace.writer import SAMPLE_ENCODING, _port_ordered  # noqa: E402
from detectors.config import Thresholds  # noqa: E402

ACME_NODES = 590


def generate(root: Path, nodes: int, seconds: int) -> list[Path]:
    """Two simulators at a time (the machine's cores)."""
    paths = [root / f"node-{index:03d}" for index in range(nodes)]
    running: list[subprocess.Popen[bytes]] = []
    for path in paths:
        if len(running) >= 2:
            running.pop(0).wait()
        command = [sys.executable, "-m", "burstscope", "simulate", "--seed", "1"]
        command += ["--host", path.name, "--duration", str(seconds), "-o", str(path)]
        running.append(subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL))
    for process in running:
        if process.wait() != 0:
            raise SystemExit("simulate failed")
    return paths


def encoding_figures(trace: Path) -> dict[str, float]:
    """Writer CPU and reader speed, compact against previous settings, on the same rows."""
    pieces = [pq.read_table(p) for p in sorted(trace.glob("part-*.parquet"))]
    rows = sum(t.num_rows for t in pieces)
    batches = [[b for b in t.to_batches()] for t in pieces]
    files: dict[str, list[bytes]] = {}
    cpu: dict[str, float] = {}
    for name in ("previous", "compact"):
        best = float("inf")
        for _ in range(3):
            began = time.process_time()
            written = []
            for table, parts in zip(pieces, batches, strict=True):
                sink = io.BytesIO()
                if name == "previous":
                    ordered = table.sort_by([("timestamp_ns", "ascending")])
                    pq.write_table(ordered, sink, compression="zstd")
                else:
                    pq.write_table(_port_ordered(_per_port(parts)), sink, **SAMPLE_ENCODING)
                written.append(sink.getvalue())
            best = min(best, time.process_time() - began)
        cpu[name] = best
        files[name] = written
    speed: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        for name, blobs in files.items():
            folder = Path(directory) / name
            folder.mkdir()
            for index, blob in enumerate(blobs):
                (folder / f"part-{index:06d}.parquet").write_bytes(blob)
            best = float("inf")
            for _ in range(3):
                began = time.process_time()
                for _samples in read_samples(folder):
                    pass
                best = min(best, time.process_time() - began)
            speed[name] = rows / best
    return {
        "writer_cpu_ns_per_row_previous": cpu["previous"] / rows * 1e9,
        "writer_cpu_ns_per_row_compact": cpu["compact"] / rows * 1e9,
        "writer_cpu_ratio": cpu["compact"] / cpu["previous"],
        "reader_rows_per_second_previous": speed["previous"],
        "reader_rows_per_second_compact": speed["compact"],
        "reader_speed_ratio": speed["compact"] / speed["previous"],
        "bytes_per_row_previous": sum(len(b) for b in files["previous"]) / rows,
    }


def _per_port(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The writer's input: one record batch per port."""
    table = pa.Table.from_batches(batches)
    out = []
    for device in table.column("device").combine_chunks().dictionary.to_pylist():
        mask = pc.equal(table.column("device").cast(pa.string()), device)
        out.extend(table.filter(mask).combine_chunks().to_batches())
    return out


def timed_report(paths: list[Path], *flags: str) -> tuple[float, bytes]:
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "report", *map(str, paths), "--json", *flags],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"report failed: {result.stderr.decode()[-2000:]}")
    return time.perf_counter() - began, result.stdout


def worker_peak_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line (the default)")
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--seconds", type=int, default=600, help="simulated seconds per node")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--directory", type=Path, help="keep the fleet here (default: temp)")
    args = parser.parse_args()
    figures: dict[str, object] = {
        "cpu_count": os.cpu_count(),
        "nodes": args.nodes,
        "seconds_per_node": args.seconds,
        "workers": args.workers,
    }
    with tempfile.TemporaryDirectory() as directory:
        root = args.directory or Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        paths = generate(root, args.nodes, args.seconds)
        figures["generation_seconds"] = time.perf_counter() - began
        rows = sum(pq.ParquetFile(p).metadata.num_rows for t in paths for p in t.glob("*.parquet"))
        size = sum(f.stat().st_size for t in paths for f in t.rglob("*") if f.is_file())
        figures["rows"] = rows
        figures["bytes_per_row"] = size / rows
        figures.update(encoding_figures(paths[0]))

        single, single_json = timed_report(paths)
        dask, dask_json = timed_report(paths, "--workers", str(args.workers))
        figures["single_process_seconds"] = single
        figures["dask_seconds"] = dask
        figures["dask_ratio"] = dask / single
        figures["identical"] = single_json == dask_json

        with dask_cluster(args.workers, None) as cluster:
            assert cluster is not None
            began = time.perf_counter()
            analyze_paths(paths, None, False, Thresholds(), cluster)
            figures["dask_analysis_seconds"] = time.perf_counter() - began
            peaks = cluster.client.run(worker_peak_bytes)
            figures["worker_peak_bytes"] = max(peaks.values())

    node_hours = args.nodes * args.seconds / 3600
    per_node_hour = single / node_hours
    figures["single_process_seconds_per_node_hour"] = per_node_hour
    figures["projection_590_nodes_1_hour"] = {
        f"{w}_workers_hours": ACME_NODES * per_node_hour / w / 3600 for w in (1, 2, 16, 64, 590)
    }
    figures["projection_assumptions"] = (
        "cost per node-hour as measured here single-process (reading, detectors, merge), "
        "scaling linearly with nodes and hours; W workers of this speed each, perfectly "
        "parallel (one task per trace, merge cost small beside it); traces on storage "
        "that feeds W readers at once; cluster start-up not included"
    )
    figures["targets_met"] = {
        "bytes_per_row": figures["bytes_per_row"] <= 4.0,  # type: ignore[operator]
        "writer_cpu": figures["writer_cpu_ratio"] <= 1.2,  # type: ignore[operator]
        "reader_speed": figures["reader_speed_ratio"] >= 1.0,  # type: ignore[operator]
        "dask_time": figures["dask_ratio"] <= 0.65,  # type: ignore[operator]
        "worker_memory": figures["worker_peak_bytes"] <= 1024**3,  # type: ignore[operator]
        "identical": figures["identical"],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
