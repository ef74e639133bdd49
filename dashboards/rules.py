"""The series the recording rules record, read from prometheus/recording.rules.yml by name.

The dashboards name a recorded series by its level and metric, the first two parts of
Prometheus' ``level:metric:operations`` (https://prometheus.io/docs/practices/rules/), and
take the whole name from the rules file: a rule whose window or aggregation changes is
followed, and one that is renamed or removed fails the build instead of leaving a panel
that draws nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RECORDING_RULES = Path(__file__).resolve().parent / "prometheus" / "recording.rules.yml"
# Every rule of the file is written "- record: NAME" on a line of its own, so a line pattern
# reads the names without a YAML parser (none is a dependency of burstscope).
_RECORD = re.compile(r"^\s*- record: (\S+)", flags=re.MULTILINE)


def recorded_names(path: Path = RECORDING_RULES) -> list[str]:
    """Every series the rules file records, in file order."""
    return _RECORD.findall(path.read_text())


@dataclass(frozen=True, slots=True)
class RecordingRules:
    """The names a rules file records, looked up by level and metric."""

    names: tuple[str, ...]
    source: str = str(RECORDING_RULES)

    @classmethod
    def read(cls, path: Path = RECORDING_RULES) -> RecordingRules:
        return cls(tuple(recorded_names(path)), str(path))

    def series(self, level: str, metric: str) -> str:
        """The one recorded ``level:metric:...``; LookupError when there is none or several."""
        prefix = f"{level}:{metric}:"
        found = [name for name in self.names if name.startswith(prefix)]
        if len(found) != 1:
            what = ", ".join(found) if found else "none"
            raise LookupError(f"{self.source}: one rule recording {prefix}... expected, {what}")
        return found[0]
