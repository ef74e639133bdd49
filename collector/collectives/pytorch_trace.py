"""PyTorch profiler traces: the collectives a rank called and the NCCL kernels that ran them.

``torch.profiler`` writes a Chrome trace-event JSON file through Kineto (pytorch/kineto
``libkineto/src/output_json.cpp``): an object with ``traceEvents``, complete events (``"ph":
"X"``) with ``ts`` and ``dur`` in microseconds (the trace-event format's unit whatever
``displayTimeUnit`` says: that key only picks how a viewer shows them). Two kinds of event are
read here:

- ``record_param_comms`` CPU ops (``"cat": "cpu_op"``): c10d's ProcessGroupNCCL wraps every
  collective, Send and Recv in one (``RECORD_PARAM_COMMS_DATA``,
  ``torch/csrc/distributed/c10d/ParamCommsUtils.hpp``), and the profiler stores its
  ``ParamCommsDebugInfo`` as the op's args (``saveNcclMeta`` in
  ``torch/csrc/profiler/util.cpp``): "Collective name" (``allreduce``, ``all_to_all``,
  ``send``, ...), "Process Group Name" (the group's uid, "0", "1", ...), "Process Group
  Description" (``default_pg``, DeviceMesh's ``mesh_<dim>``, Megatron's
  ``EXPERT_MODEL_PARALLEL_GROUP``, or what ``new_group(group_desc=...)`` was given),
  "Process Group Ranks" (a string "[0, 1, ...]" that PyTorch cuts after 30 ranks as
  "[r0, ..., r28, ..., rN]": read as None then), "Group size", "Rank", "dtype", "In msg
  nelems" and "Out msg nelems" (element counts, not bytes: bytes here are counts times the
  dtype's size), "Dst Rank" for send and "Src Rank" for recv (global ranks), "Seq".
- NCCL kernels on the GPU streams (``"cat": "kernel"``, ``pid`` the device, ``tid`` the
  stream): names ``ncclDevKernel_<Coll>_...`` (NCCL 2.19 on, ``src/device/generate.py``) or
  ``ncclKernel_<Coll>_...`` before. The name gives the kernel NCCL specialised, not always
  the operation: every Send/Recv and every AllToAll built from them (as PyTorch builds it)
  runs in ``ncclDevKernel_SendRecv``, and an unspecialised one in ``ncclDevKernel_Generic``.
  So each kernel carries the collective's metadata: Kineto copies the linked
  ``record_param_comms`` op's args into the kernel's own (kineto#821, October 2023; now
  ``appendCollectiveMetadata``); otherwise the op with the kernel's "External id" gives them.

Time base. Kineto keeps every activity in Unix-epoch nanoseconds: CPU ops through its
approximate (TSC) clock calibrated against ``std::chrono::system_clock``
(``ApproximateClock.cpp``), and CUPTI's GPU activity timestamps put on that same clock (a
timestamp callback, CUDA 11.6 on: ``CuptiTimestamp.cpp``). Since kineto#910 (April 2024)
``ts`` is written relative to a base (``ChromeTraceBaseTime``: Kineto's start, and a week
later ``system_clock::now()`` floored to a three-month boundary), as
"microseconds.nanoseconds"; since kineto#928 (May 2024) the base is in the file as
``baseTimeNanoseconds``. So here: Unix ns = ``baseTimeNanoseconds`` +
``ts`` x 1000, read with decimals so that no nanosecond is lost. Traces from before
kineto#910 have absolute ``ts`` (Unix microseconds, told apart by their size); the few
written between the two changes have neither, and need ``base_unix_ns`` from the caller.
The clock is the host's wall clock at profiling time (NTP-disciplined, like the counters').

The file is read whole (json), not streamed: ``max_bytes`` (512 MiB by default) bounds it;
a decoded trace takes several times its size in memory. ``.gz`` files (``tensorboard_trace_
handler(use_gzip=True)``) are read too, the bound applying to the decompressed size. An
event that cannot be read is one counted, logged skip; a file that is not a trace, or whose
time base cannot be known, is a TraceError.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

_LOG = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 512 * 1024 * 1024

# How the trace's ts became Unix time (PytorchTrace.time_base).
BASE_TIME = "baseTimeNanoseconds"  # ts relative to the trace's own base
ABSOLUTE = "absolute"  # ts already Unix microseconds (Kineto before April 2024)
GIVEN = "given"  # ts relative to the base the caller gave
# Relative ts stay under three months (7.9e12 us); absolute ones are past 1.5e15 (2017).
_ABSOLUTE_TS_MICROSECONDS = Decimal(10**14)

PARAM_COMMS = "record_param_comms"  # torch::kParamCommsCallName
_KERNEL = re.compile(r"(?:ncclDevKernel|ncclKernel)_([A-Za-z0-9]+)")

# c10::toString(ScalarType) -> bytes per element (c10/core/ScalarType.h).
DTYPE_BYTES: Mapping[str, int] = {
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "QInt8": 1,
    "QUInt8": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e8m0fnu": 1,
    "Float4_e2m1fn_x2": 1,
    "Short": 2,
    "UInt16": 2,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "UInt32": 4,
    "Float": 4,
    "QInt32": 4,
    "ComplexHalf": 4,
    "Long": 8,
    "UInt64": 8,
    "Double": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}

# Kinds of skipped events, the keys of PytorchTrace.skipped.
BAD_EVENT = "bad event"  # a record_param_comms op or NCCL kernel without usable ts/dur/ids
NO_COLLECTIVE = "no collective name"  # a record_param_comms op without its metadata


class TraceError(ValueError):
    """The file is not a readable trace, or its times cannot be put on the Unix clock."""


@dataclass(frozen=True, slots=True)
class CollectiveMetadata:
    """What c10d recorded about one collective call (``saveNcclMeta``'s args)."""

    collective: str  # "Collective name": allreduce, all_to_all, send, recv, ...
    group_name: str | None  # "Process Group Name": the group's uid
    group_description: str | None  # "Process Group Description"
    group_ranks: tuple[int, ...] | None  # "Process Group Ranks" (None when cut after 30)
    group_size: int | None  # "Group size"
    rank: int | None  # "Rank": this process's rank in the group (the peer's for send/recv)
    peer: int | None  # "Dst Rank" (send) or "Src Rank" (recv): a global rank
    dtype: str | None  # "dtype": c10's ScalarType name
    in_elements: int | None  # "In msg nelems"
    out_elements: int | None  # "Out msg nelems"
    in_bytes: int | None  # in_elements x the dtype's size (None for an unknown dtype)
    out_bytes: int | None  # out_elements x the dtype's size
    sequence_number: int | None  # "Seq": the group's collective count


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One ``record_param_comms`` op: the CPU side of a collective, Send or Recv."""

    metadata: CollectiveMetadata
    pid: int  # the process
    tid: int  # the calling thread
    external_id: int | None  # args "External id": the kernels it launched carry the same
    start_unix_ns: int
    end_unix_ns: int


@dataclass(frozen=True, slots=True)
class NcclKernel:
    """One NCCL kernel on a GPU stream."""

    name: str  # as CUPTI gave it, arguments included
    kernel: str  # from the name: AllReduce, AllGather, ReduceScatter, SendRecv, Generic, ...
    device: int  # pid: the CUDA device
    stream: int  # tid: the CUDA stream
    correlation: int | None  # args "correlation": the launching runtime call
    external_id: int | None  # args "External id": the CPU op it was launched under
    metadata: CollectiveMetadata | None  # the collective it ran, when the trace says
    start_unix_ns: int
    end_unix_ns: int


@dataclass(frozen=True, slots=True)
class PytorchTrace:
    """The collectives of one rank's trace, on the Unix clock, in time order."""

    calls: tuple[CollectiveCall, ...]
    kernels: tuple[NcclKernel, ...]
    time_base: str  # BASE_TIME, ABSOLUTE or GIVEN
    base_unix_ns: int  # added to ts x 1000 (0 for ABSOLUTE)
    skipped: Mapping[str, int]  # events left out, by kind


def read_trace(
    path: str | Path, base_unix_ns: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> PytorchTrace:
    """Read a trace file (``.json`` or ``.json.gz``) of at most ``max_bytes``."""
    path = Path(path)
    data = read_trace_bytes(path, max_bytes)
    try:
        document = json.loads(data, parse_float=Decimal)
    except ValueError as error:
        raise TraceError(f"{path}: not JSON: {error}") from error
    return parse_trace(document, base_unix_ns, str(path))


def read_trace_bytes(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """A trace file's bytes (``.json``, or ``.json.gz`` decompressed), at most ``max_bytes``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as file:
                data = file.read(max_bytes + 1)
        else:
            with path.open("rb") as file:
                data = file.read(max_bytes + 1)
    except (OSError, EOFError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise TraceError(f"{path}: cannot be read: {reason}") from None
    if len(data) > max_bytes:
        raise TraceError(f"{path}: larger than {max_bytes} bytes: not read")
    return data


def parse_trace(
    document: object, base_unix_ns: int | None = None, source: str = "trace"
) -> PytorchTrace:
    """A decoded trace (floats as Decimal for exact times) as collective calls and kernels."""
    # The format's object form, or its plain array of events.
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise TraceError(f"{source}: no traceEvents list: not a Chrome trace")
    time_base, base = _time_base(document, events, base_unix_ns, source)
    skipped: Counter[str] = Counter()
    calls: list[CollectiveCall] = []
    kernels: list[tuple[dict[str, Any], NcclKernel]] = []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        name = event.get("name")
        category = event.get("cat")
        if name == PARAM_COMMS:
            call = _call(event, base, skipped, source)
            if call is not None:
                calls.append(call)
        elif (
            isinstance(name, str)
            and isinstance(category, str)
            and category.lower() == "kernel"
            and (match := _KERNEL.match(name))
        ):
            kernel = _kernel(event, match.group(1), base, skipped, source)
            if kernel is not None:
                kernels.append((event, kernel))
    by_external_id = {c.external_id: c for c in calls if c.external_id is not None}
    linked = [_linked(kernel, by_external_id) for _, kernel in kernels]
    calls.sort(key=lambda c: (c.start_unix_ns, c.pid, c.tid))
    linked.sort(key=lambda k: (k.start_unix_ns, k.device, k.stream))
    return PytorchTrace(
        calls=tuple(calls),
        kernels=tuple(linked),
        time_base=time_base,
        base_unix_ns=base,
        skipped=dict(sorted(skipped.items())),
    )


def parse_ranks(text: str) -> tuple[int, ...] | None:
    """ "[0, 1, 2]" as ranks; None for PyTorch's cut form "[0, 1, ..., 63]" or anything else."""
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        return None
    parts = [part.strip() for part in inner[1:-1].split(",") if part.strip()]
    if not all(part.isdigit() for part in parts):
        return None  # "..." where PyTorch cut the list
    return tuple(int(part) for part in parts)


def _time_base(
    document: object, events: list[Any], given: int | None, source: str
) -> tuple[str, int]:
    if given is not None:
        return GIVEN, given
    base = document.get("baseTimeNanoseconds") if isinstance(document, dict) else None
    if isinstance(base, int) and not isinstance(base, bool) and base > 0:
        return BASE_TIME, base
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X":
            ts = _decimal(event.get("ts"))
            if ts is not None:
                if ts >= _ABSOLUTE_TS_MICROSECONDS:
                    return ABSOLUTE, 0
                break
    raise TraceError(
        f"{source}: ts is relative and the trace has no baseTimeNanoseconds "
        "(Kineto of April-May 2024): give base_unix_ns"
    )


def _decimal(value: object) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | Decimal):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, str):  # some writers quote numbers
        try:
            return Decimal(value)
        except InvalidOperation:
            return None
    return None


def _span(event: dict[str, Any], base: int) -> tuple[int, int] | None:
    ts, dur = _decimal(event.get("ts")), _decimal(event.get("dur"))
    if ts is None or dur is None or not ts.is_finite() or not dur.is_finite() or dur < 0:
        return None
    start = base + int((ts * 1000).to_integral_value())
    return start, start + int((dur * 1000).to_integral_value())


def _whole(value: object) -> int | None:
    """An integer arg, as Kineto writes them (a number, or a number in a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value.strip('"') or None  # the legacy path leaves a pair of quotes
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # a group uid written as a number
    return None


def _metadata(args: dict[str, Any]) -> CollectiveMetadata | None:
    collective = _text(args.get("Collective name"))
    if collective is None:
        return None
    dtype = _text(args.get("dtype"))
    size = DTYPE_BYTES.get(dtype) if dtype is not None else None
    in_elements = _whole(args.get("In msg nelems"))
    out_elements = _whole(args.get("Out msg nelems"))
    ranks = args.get("Process Group Ranks")
    peer = _whole(args.get("Dst Rank"))
    return CollectiveMetadata(
        collective=collective,
        group_name=_text(args.get("Process Group Name")),
        group_description=_text(args.get("Process Group Description")),
        group_ranks=parse_ranks(ranks) if isinstance(ranks, str) else None,
        group_size=_whole(args.get("Group size")),
        rank=_whole(args.get("Rank")),
        peer=peer if peer is not None else _whole(args.get("Src Rank")),
        dtype=dtype,
        in_elements=in_elements,
        out_elements=out_elements,
        in_bytes=None if size is None or in_elements is None else in_elements * size,
        out_bytes=None if size is None or out_elements is None else out_elements * size,
        sequence_number=_whole(args.get("Seq")),
    )


def _call(
    event: dict[str, Any], base: int, skipped: Counter[str], source: str
) -> CollectiveCall | None:
    span = _span(event, base)
    pid, tid = _whole(event.get("pid")), _whole(event.get("tid"))
    args = event.get("args")
    if span is None or pid is None or tid is None or not isinstance(args, dict):
        _skip(skipped, BAD_EVENT, source, event)
        return None
    metadata = _metadata(args)
    if metadata is None:
        _skip(skipped, NO_COLLECTIVE, source, event)
        return None
    return CollectiveCall(
        metadata=metadata,
        pid=pid,
        tid=tid,
        external_id=_whole(args.get("External id")),
        start_unix_ns=span[0],
        end_unix_ns=span[1],
    )


def _kernel(
    event: dict[str, Any], kernel: str, base: int, skipped: Counter[str], source: str
) -> NcclKernel | None:
    span = _span(event, base)
    device, stream = _whole(event.get("pid")), _whole(event.get("tid"))
    args = event.get("args", {})
    if span is None or device is None or stream is None or not isinstance(args, dict):
        _skip(skipped, BAD_EVENT, source, event)
        return None
    return NcclKernel(
        name=event["name"],
        kernel=kernel,
        device=device,
        stream=stream,
        correlation=_whole(args.get("correlation")),
        external_id=_whole(args.get("External id")),
        metadata=_metadata(args),
        start_unix_ns=span[0],
        end_unix_ns=span[1],
    )


def _linked(kernel: NcclKernel, calls: Mapping[int, CollectiveCall]) -> NcclKernel:
    """The kernel with its collective's metadata: its own args first, else its CPU op's."""
    if kernel.metadata is not None or kernel.external_id is None:
        return kernel
    call = calls.get(kernel.external_id)
    if call is None:
        return kernel
    return replace(kernel, metadata=call.metadata)


def _skip(skipped: Counter[str], kind: str, source: str, event: dict[str, Any]) -> None:
    skipped[kind] += 1
    first = skipped[kind] == 1
    _LOG.log(
        logging.WARNING if first else logging.DEBUG,
        "%s: skipped an event (%s): %s at ts %r%s",
        source,
        kind,
        str(event.get("name"))[:80],
        event.get("ts"),
        ", further ones are logged at DEBUG" if first else "",
    )
