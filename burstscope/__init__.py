"""burstscope: millisecond InfiniBand and RoCE port telemetry."""

from typing import Any


def __getattr__(name: str) -> Any:
    """``__version__``: pyproject.toml's version as the installed distribution states it,
    written once. Looked up on first use: importlib.metadata costs about 0.1 s to import,
    which every process of the package (the sampler's among them) would otherwise pay."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("burstscope")
    except metadata.PackageNotFoundError:  # a checkout that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version
