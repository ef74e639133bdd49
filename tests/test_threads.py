"""The agent's threads carry their names into the kernel, for top -H and ps -L."""

from __future__ import annotations

import threading
from pathlib import Path

from burstscope.collector.threads import name_os_thread, os_thread_name


def test_names_are_shortened_to_the_kernels_fifteen_characters() -> None:
    assert os_thread_name("burstscope-pipeline") == "bs-pipeline"
    assert os_thread_name("burstscope-collectives") == "bs-collectives"
    assert os_thread_name("burstscope-pfc-watchdog") == "bs-pfc-watchdog"
    assert len(os_thread_name("burstscope-a-name-far-too-long-for-comm")) == 15
    assert os_thread_name("replay-loader") == "replay-loader"


def test_a_thread_that_names_itself_shows_the_name_in_proc() -> None:
    seen: list[str] = []

    def run() -> None:
        name_os_thread()
        comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm")
        seen.append(comm.read_text().strip())

    thread = threading.Thread(target=run, name="burstscope-collectives")
    thread.start()
    thread.join()
    assert seen == ["bs-collectives"]
    # The calling thread's own name is untouched.
    own = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()
    assert own != "bs-collectives"
