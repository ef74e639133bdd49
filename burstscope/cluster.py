"""Where a report's tasks run: this process, or a Dask cluster (local or an existing one).

Dask is imported only when a cluster is asked for (`--workers`, `--scheduler`), so the
single-process report needs neither dask nor distributed installed.
"""

from __future__ import annotations

import importlib.util
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from burstscope.errors import UsageError

Result = TypeVar("Result")
INSTALL_HINT = "pip install 'burstscope[fleet]'"
CONNECT_TIMEOUT_SECONDS = 5
_TRIM_KEY = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
_START_METHOD_KEY = "distributed.worker.multiprocessing-method"
_PROFILE_KEY = "distributed.worker.profile.enabled"
LOCAL_QUIET = {
    "distributed.admin.system-monitor.interval": "5s",  # default 500 ms
    "distributed.admin.tick.interval": "200ms",  # default 20 ms
    "distributed.worker.memory.monitor-interval": "1s",  # default 100 ms
}


@dataclass(frozen=True, slots=True)
class Cluster:
    """A live Dask client; made by :func:`dask_cluster`."""

    client: Any  # distributed.Client
    description: str  # for messages: "local cluster of 2 workers", "tcp://host:8786"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError(
            f"--workers and --scheduler need Dask distributed, which is not installed "
            f"({INSTALL_HINT})"
        ) from None
    return distributed


def start_local_workers_early(workers: int | None, scheduler: str | None) -> None:
    """For ``--workers``: start the forkserver its workers fork from, now, loading what they
    run (distributed and the report's modules: 0.3 to 0.45 s) while this process loads the
    same, rather than once the cluster asks for its first worker (Dask starts it then, with
    distributed and numpy only, and each worker loads the report at its first task).
    Nothing for a scheduler, or without distributed (dask_cluster says so)."""
    if workers is None or workers < 1 or scheduler is not None:
        return
    if importlib.util.find_spec("distributed") is None:
        return
    import multiprocessing
    from multiprocessing import forkserver

    preload = ["distributed", "burstscope.report_model"]
    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)
    forkserver.ensure_running()  # Dask's own preload list is ignored once it runs


@contextmanager
def dask_cluster(workers: int | None, scheduler: str | None) -> Iterator[Cluster | None]:
    """None for neither flag (run here); a LocalCluster of ``workers`` processes; or a
    client of the scheduler at ``scheduler``. Closed on leaving."""
    if workers is not None and scheduler is not None:
        raise UsageError("give --workers N (a local cluster) or --scheduler URL, not both")
    if workers is None and scheduler is None:
        yield None
        return
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    distributed = _distributed()
    if workers is not None:
        import dask

        # One thread per worker: the detectors hold the GIL for most of their numpy calls'
        # overhead, so processes, not threads, are what run side by side. And no
        # MALLOC_TRIM_THRESHOLD_ in the workers (Dask's nanny sets 65536 by default): setting
        # it turns off glibc's dynamic mmap threshold (mallopt(3)), so every numpy array over
        # 128 KiB is mapped and unmapped afresh, and a trace's analysis took 1.6x the CPU.
        # Workers forked from a forkserver that has imported distributed and numpy (and the
        # report's modules: start_local_workers_early) start and stop faster than spawned
        # ones (0.30 s up and 0.02 s down against 0.36 and 0.11 for two workers here).
        # And no statistical profiler: a worker samples its task thread's stack every 10 ms
        # for the dashboard's profile page, which a local cluster here does not serve; the
        # samples took the GIL from the detectors (a 24-node report's tasks: 7.0 s without
        # against 7.4 s with, mean of four runs each). The other sampling loops run ten
        # times less often (LOCAL_QUIET): each takes the GIL from the task in its turn, for
        # a dashboard nobody sees (system monitor), an event-loop stall warning that is
        # silenced (tick) or a memory check a batch worker needs once a second, not ten
        # times (6.59 s against 6.91 s, three runs each).
        settings = {
            _TRIM_KEY: None,
            _START_METHOD_KEY: "forkserver",
            _PROFILE_KEY: False,
            **LOCAL_QUIET,
        }
        with (
            dask.config.set(settings),
            distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                # The scheduler serves HTTP (health, metrics) even without a dashboard, on
                # port 8787 unless told: a second cluster on the machine (another report)
                # would find it taken and warn on stderr. Any free loopback port instead.
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                # A task's exception comes back to the client, which names it in one line; the
                # worker's own "Compute Failed" log of it would be a second, longer one.
                silence_logs=logging.CRITICAL,
            ) as local,
            distributed.Client(local) as client,
        ):
            yield Cluster(client, f"local cluster of {workers} worker{'' if workers == 1 else 's'}")
        return
    assert scheduler is not None
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_SECONDS)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler!r}: {reason}") from None
    try:
        yield Cluster(client, scheduler)
    finally:
        client.close()


def map_in(
    cluster: Cluster | None,
    function: Callable[..., Result],
    arguments: Sequence[tuple[Any, ...]],
) -> list[Result]:
    """``[function(*a) for a in arguments]``, here or as one Dask task each, in order.

    A task's exception (a UsageError naming a bad trace) is raised here as it was there.
    """
    if cluster is None:
        return [function(*a) for a in arguments]
    run = uuid.uuid4().hex[:12]  # a shared scheduler may hold another report's keys
    futures = [
        cluster.client.submit(function, *a, pure=False, key=f"burstscope-{run}-{index}")
        for index, a in enumerate(arguments)
    ]
    # Each result comes over as its task ends, while the others run; gather() would fetch
    # them all only once the last one had ended, with both workers idle.
    distributed = _distributed()
    position = {future.key: index for index, future in enumerate(futures)}
    results: dict[int, Result] = {}
    try:
        for future, result in distributed.as_completed(futures, with_results=True):
            results[position[future.key]] = result
            future.release()
    except distributed.KilledWorker as exc:
        # The scheduler gave the task to a fresh worker after each death, then gave up.
        failed = arguments[position[exc.task]][0]
        raise UsageError(
            f"{cluster.description}: {exc.allowed_failures + 1} workers died running "
            f"{function.__name__} on {str(failed)!r} (killed, or out of memory?)"
        ) from None
    return [results[index] for index in range(len(futures))]
