"""The compiled parts; everything else is in pyproject.toml.

The tick of the file counter sources is optional on x86 only: where no C compiler or Python
headers exist, the build goes on without it, burstscope.collector.sources.files reads the
counters in pure Python (same results) and the ring's head is a plain word, which x86's
store order (TSO) keeps correct. On other machines (AArch64: Grace nodes) the ring needs the
module's release and acquire accesses (collector/ring.py says why), so a failed build stops
the install instead.

The reader of NCCL Inspector's compact lines (collector/collectives/_spans.c) is optional
everywhere: without it the agent reads the same spans through msgspec, at more CPU.
"""

import platform

from setuptools import Extension, setup

TOTAL_STORE_ORDER = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")

setup(
    ext_modules=[
        Extension(
            "burstscope.collector.sources._tick",
            sources=["collector/sources/_tick.c"],
            extra_compile_args=["-O2"],
            optional=TOTAL_STORE_ORDER,
        ),
        Extension(
            "burstscope.collector.collectives._spans",
            sources=["collector/collectives/_spans.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
