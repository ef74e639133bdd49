"""Counter files served by FUSE, for what a plain file cannot do: fail a read (EIO, EINVAL)
or take a known, long time to answer one, as a firmware-backed sysfs read does.

A small mfusepy server (its own process) serves a few files whose text, errors and read
delay a test sets by writing to the mount's ``control`` file; ``link_counters`` puts them in
place of a port's data counters in a sysfs copy. FUSE itself adds 50-200 us per read on
this kind of machine, more under load, so an injected delay should be milliseconds.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from burstscope.testing.processes import wait_until

# "NAME EIO": the file's reads fail with that errno; "NAME ok": they succeed again;
# "NAME 123": its text is 123; "delay 0.003": every read of a served file sleeps 3 ms first.
SERVER = r"""
import errno, stat, sys, time
import mfusepy as fuse

values = {"/" + name: b"100\n" for name in sys.argv[2:]}
errors = {}
delay = [0.0]

class Counters(fuse.Operations):
    def getattr(self, path, fh=None):
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        if path in values or path == "/control":
            return {"st_mode": stat.S_IFREG | 0o666, "st_nlink": 1, "st_size": 4096}
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "control", *(name[1:] for name in values)]

    def open(self, path, flags):
        return 0

    def truncate(self, path, length, fh=None):
        return 0

    def read(self, path, size, offset, fh):
        if path in values and delay[0]:
            time.sleep(delay[0])
        if path in errors:
            raise fuse.FuseOSError(errors[path])
        return values.get(path, b"")[offset:offset + size]

    def write(self, path, data, offset, fh):
        name, _, what = data.decode().strip().partition(" ")
        key = "/" + name
        if name == "delay":
            delay[0] = float(what)
        elif what == "ok":
            errors.pop(key, None)
        elif what.isupper():
            errors[key] = getattr(errno, what)
        else:
            values[key] = (what + "\n").encode()
        return len(data)

fuse.FUSE(Counters(), sys.argv[1], foreground=True, direct_io=True, allow_other=False)
"""


def fuse_unavailable() -> str | None:
    """Why FUSE trees cannot be served here (for the test's skip), or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if importlib.util.find_spec("mfusepy") is None:  # the server imports it, not this process
        return "mfusepy is not installed (pip install -e '.[test]')"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (fuse3)"
    return None


class FuseMountError(RuntimeError):
    """The FUSE server did not mount (the message carries its stderr)."""


class FuseFiles:
    """The mount of a running server: ``path(name)`` of a served file, ``control(command)``."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount

    def path(self, name: str) -> Path:
        return self.mount / name

    def control(self, command: str) -> None:
        with (self.mount / "control").open("w") as out:
            out.write(command)


@contextmanager
def served_files(directory: Path, names: Sequence[str]) -> Iterator[FuseFiles]:
    """Serve ``names`` (each reading ``100``) on a FUSE mount under ``directory``;
    FuseMountError if it does not mount within the processes' deadline."""
    mount = directory / "fuse"
    mount.mkdir()
    server = directory / "fuse_counters.py"
    server.write_text(SERVER)
    process = subprocess.Popen(
        [sys.executable, str(server), str(mount), *names], stderr=subprocess.PIPE, text=True
    )
    try:
        if not wait_until(lambda: (mount / "control").exists()):
            process.kill()
            raise FuseMountError(f"FUSE mount failed: {process.communicate()[1][-500:]}")
        yield FuseFiles(mount)
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mount)], check=False)
        process.kill()
        process.wait()


def link_counters(sysfs_root: Path, device: str, files: FuseFiles, xmit: str, rcv: str) -> None:
    """Make ``device``'s port 1 data counters links to the served ``xmit`` and ``rcv``."""
    counters = sysfs_root / "class" / "infiniband" / device / "ports" / "1" / "counters"
    for name, target in (("port_xmit_data", xmit), ("port_rcv_data", rcv)):
        (counters / name).unlink()
        (counters / name).symlink_to(files.path(target))
