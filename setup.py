"""The optional compiled tick of the file counter sources; everything else is in pyproject.toml.

``optional=True``: where no C compiler or Python headers exist, the build goes on without
it and burstscope.collector.sources.files reads the counters in pure Python (same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "burstscope.collector.sources._tick",
            sources=["collector/sources/_tick.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
