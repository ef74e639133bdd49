"""burstscope: millisecond InfiniBand and RoCE port telemetry."""

from __future__ import annotations

from typing import TYPE_CHECKING

# A checkout run without being installed has no package metadata to read the version from.
UNKNOWN_VERSION = "0+unknown"

if TYPE_CHECKING:
    __version__: str  # pyproject.toml's [project] version, from the installed metadata
else:

    def __getattr__(name: str) -> str:
        """``__version__`` on first use (PEP 562): importlib.metadata takes tens of
        milliseconds to load, which ``burstscope -h`` and ``discover`` need not pay."""
        if name != "__version__":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("burstscope")
        except PackageNotFoundError:
            found = UNKNOWN_VERSION
        globals()["__version__"] = found
        return found
