"""Precision and recall of a detector against injected faults, one definition for every
scorer (burstscope.testing.faults_*, bench/culprits.py)."""

from __future__ import annotations


def recall(found: int, injected: int) -> float:
    """Injected faults found; 1.0 when nothing was injected."""
    return found / injected if injected else 1.0


def precision(found: int, false_alarms: int) -> float:
    """Reports that match an injected fault; 1.0 when nothing was reported."""
    reported = found + false_alarms
    return found / reported if reported else 1.0
