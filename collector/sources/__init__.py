"""Counter sources, one module each, behind one small protocol; ``build_source`` parses a SPEC.

A SPEC is ``NAME`` or ``NAME:ARGUMENT``: ``sysfs`` (every discovered port),
``netdev:IF[,IF...]``, ``sim[:PROFILE]``, ``replay:PATH``. Adding a source touches its
module (which defines ``from_spec``) and one line of ``_REGISTRY``.
"""

from __future__ import annotations

import importlib

from burstscope.collector.sources.base import CounterSource, SourceError, SourceOptions

_REGISTRY = {
    "sysfs": "burstscope.collector.sources.infiniband",
    "netdev": "burstscope.collector.sources.netdev",
    "sim": "burstscope.collector.sources.sim",
    "replay": "burstscope.collector.sources.replay",
}
SOURCE_NAMES = tuple(_REGISTRY)  # the NAMEs a SPEC may start with


def build_source(spec: str, options: SourceOptions | None = None) -> CounterSource:
    """The source a SPEC names; raises SourceError with one clear line when it cannot be built."""
    name, _, argument = spec.partition(":")
    module_name = _REGISTRY.get(name)
    if module_name is None:
        known = ", ".join(_REGISTRY)
        raise SourceError(f"unknown source {spec!r} (known: {known})")
    module = importlib.import_module(module_name)
    source: CounterSource = module.from_spec(argument or None, options or SourceOptions())
    return source
