"""burstscope: millisecond InfiniBand and RoCE port telemetry."""

__version__ = "0.1.0"
