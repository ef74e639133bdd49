"""Coflow mapping files: parse and check them into detectors.coflows' Mapping, then collide."""

# Mapping file (text, one selector per line, ``#`` starts a comment):
#
#     # SELECTOR   TYPE  MICRO-BATCH  LAYER
#     qp=0x11      EP    0            3
#     qp=18        DP    0            11
#     dscp=26      PP    1            0
#
# A selector is ``qp=N`` (destination QP, decimal or 0x hex, any destination address) or
# ``dscp=N`` (0-63); a QP selector wins over a DSCP one. TYPE is EP (expert parallel), PP
# (pipeline parallel) or DP (data parallel). The coflow is (type, micro-batch, layer): many
# selectors may name the same coflow. What a collision is: see detectors/coflows.py.

from __future__ import annotations

import re
from pathlib import Path

from burstscope.capture.analysis import frame_columns, packet_columns
from burstscope.capture.decode import Decoded
from burstscope.capture.pcap import Records
from burstscope.detectors import coflows
from burstscope.detectors.coflows import TYPE_RANK, Coflow, Mapping

_SELECTOR = re.compile(r"^(qp|dscp)=(0x[0-9a-fA-F]+|\d+)$")


class MappingError(Exception):
    """A mapping file line that cannot be used: 'FILE:LINE: problem'."""


def parse_mapping(text: str, name: str = "mapping") -> Mapping:
    by: dict[str, dict[int, Coflow]] = {"qp": {}, "dscp": {}}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{name}:{number}"
        if len(fields) != 4:
            raise MappingError(
                f"{where}: expected SELECTOR TYPE MICRO-BATCH LAYER, got {len(fields)} field(s)"
            )
        selector, kind, micro_batch, layer = fields
        match = _SELECTOR.match(selector)
        if match is None:
            raise MappingError(f"{where}: selector {selector!r} is not qp=N or dscp=N")
        field, value = match.group(1), int(match.group(2), 0)
        limit = 0xFFFFFF if field == "qp" else 63
        if value > limit:
            raise MappingError(f"{where}: {field} {value} is out of range 0..{limit}")
        kind = kind.upper()
        if kind not in TYPE_RANK:
            raise MappingError(f"{where}: type {fields[1]!r} is not EP, PP or DP")
        numbers = []
        for label, text_value in (("micro-batch", micro_batch), ("layer", layer)):
            if not text_value.isdigit():
                raise MappingError(f"{where}: {label} {text_value!r} is not a whole number >= 0")
            numbers.append(int(text_value))
        if value in by[field]:
            raise MappingError(f"{where}: {field}={value} is mapped twice")
        by[field][value] = Coflow(numbers[0], TYPE_RANK[kind], numbers[1], kind)
    if not by["qp"] and not by["dscp"]:
        raise MappingError(
            f"{name}: no mappings (expected lines of SELECTOR TYPE MICRO-BATCH LAYER)"
        )
    return Mapping(by["qp"], by["dscp"])


def read_mapping(path: Path) -> Mapping:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not text"
        raise MappingError(f"{path}: cannot read: {reason}") from None
    return parse_mapping(text, str(path))


def collisions(
    records: Records,
    decoded: Decoded,
    mapping: Mapping,
    line_rate_bytes_per_second: int,
    saturated: float = 0.9,
) -> coflows.Collisions:
    """burstscope.detectors.coflows.collisions on a decoded pcap."""
    return coflows.collisions(
        frame_columns(records),
        packet_columns(decoded),
        mapping,
        line_rate_bytes_per_second,
        saturated,
    )
