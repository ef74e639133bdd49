"""The parallelism class of a collective (Hermod's EP, PP, DP), and which rule decided it.

The classes are detectors/coflows.py's coflow types (``Coflow.kind``, the keys of
``TYPE_RANK``). Rules, tried in this order; the first that decides wins:

1. A user's mapping (``MAPPING_COMMUNICATOR`` then ``MAPPING_GROUP``): an NCCL communicator id
   (compared without case) or a group name (exactly) to "EP", "PP", "DP", or ``OTHER`` for a
   group known to be none of them. Whoever runs the job knows best.
2. The group's names (``GROUP_NAME``): PyTorch's process group description and name, NCCL's
   communicator name. A name is cut into words (at non-letters, camelCase and digits), and
   the words name families: EP ("ep", "expert", "experts", "moe"), PP ("pp", "pipeline",
   "pipe"), DP ("dp", "data", "ddp", "fsdp", "hsdp"), and parallelisms that are none of
   Hermod's types, tensor and context/sequence ("tp", "tensor", "cp", "context", "sp",
   "sequence"). One family decides. Several decide only when DP is among them without PP: a
   data-parallel group over experts (Megatron's ``EXPERT_DATA_PARALLEL_GROUP``, torchtitan's
   ``dp_shard_mod_ep``) or over context/tensor ranks (``DATA_PARALLEL_GROUP_WITH_CP``,
   ``dp_shard_cp``) reduces gradients: DP. Any other mix (``EXPERT_TENSOR_PARALLEL_GROUP``
   is tensor parallelism inside experts; ``EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP`` carries
   EP's dispatch) and names that disagree decide nothing. Words are whole: "metadata" is not
   "data", "pp2" is "pp". Names such as "default_pg", "0" or "mesh_dim_1" say nothing.
3. Inference from the collective, only when the rules above said nothing:
   ``INFERRED_ALL_TO_ALL`` (AllToAll is EP), ``INFERRED_SEND_RECV`` (Send/Recv is PP), and
   ``INFERRED_LARGEST_GROUP`` (AllReduce, AllGather or ReduceScatter on the group with the
   most ranks among those given, ties broken by nodes, is DP). Their limits: NCCL 2.30's
   Inspector logs an AllToAll that PyTorch built from grouped Send/Recv as Send and Recv (so
   PP by this rule); the largest group is often the whole world, whose AllReduce may be a
   loss or gradient-norm reduction; a DP group smaller than another group's (MoE with EP
   wider than DP) is never found this way.
4. ``UNDECIDED``: no class.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from burstscope.detectors.coflows import TYPE_RANK

OTHER = "other"  # a mapping's value for a group that is none of Hermod's types

MAPPING_COMMUNICATOR = "mapping:communicator"
MAPPING_GROUP = "mapping:group"
GROUP_NAME = "group name"
INFERRED_ALL_TO_ALL = "inferred:all-to-all"
INFERRED_SEND_RECV = "inferred:send-recv"
INFERRED_LARGEST_GROUP = "inferred:largest-group"
UNDECIDED = "undecided"

# Canonical collective names (NCCL's spelling).
ALL_REDUCE = "AllReduce"
ALL_GATHER = "AllGather"
REDUCE_SCATTER = "ReduceScatter"
ALL_TO_ALL = "AllToAll"
SEND = "Send"
RECV = "Recv"
SEND_RECV = "SendRecv"
BROADCAST = "Broadcast"
REDUCE = "Reduce"
BARRIER = "Barrier"
GATHER = "Gather"
SCATTER = "Scatter"

# Lower case without underscores -> canonical: NCCL's names (Inspector's coll, kernel names:
# "All2All" is the Inspector's from 2.30) and c10d's "Collective name"s.
_COLLECTIVES = {
    "allreduce": ALL_REDUCE,
    "allreducecoalesced": ALL_REDUCE,
    "allgather": ALL_GATHER,
    "allgatherv": ALL_GATHER,
    "allgatherbase": ALL_GATHER,
    "allgathercoalesced": ALL_GATHER,
    "allgatherintotensor": ALL_GATHER,
    "allgatherintotensorcoalesced": ALL_GATHER,
    "reducescatter": REDUCE_SCATTER,
    "reducescatterv": REDUCE_SCATTER,
    "reducescatterbase": REDUCE_SCATTER,
    "reducescattertensor": REDUCE_SCATTER,
    "reducescattertensorcoalesced": REDUCE_SCATTER,
    "alltoall": ALL_TO_ALL,
    "all2all": ALL_TO_ALL,
    "alltoallv": ALL_TO_ALL,
    "alltoallbase": ALL_TO_ALL,
    "alltoallsingle": ALL_TO_ALL,
    "send": SEND,
    "recv": RECV,
    "sendrecv": SEND_RECV,
    "broadcast": BROADCAST,
    "broadcastoop": BROADCAST,
    "reduce": REDUCE,
    "reduceoop": REDUCE,
    "barrier": BARRIER,
    "gather": GATHER,
    "scatter": SCATTER,
}
_POINT_TO_POINT = frozenset({SEND, RECV, SEND_RECV})
_DATA_PARALLEL_COLLECTIVES = frozenset({ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER})

_EP, _PP, _DP = "EP", "PP", "DP"  # coflows.py's names (TYPE_RANK), checked by the tests
_FAMILIES = {
    "ep": _EP,
    "expert": _EP,
    "experts": _EP,
    "moe": _EP,
    "pp": _PP,
    "pipeline": _PP,
    "pipe": _PP,
    "dp": _DP,
    "data": _DP,
    "ddp": _DP,
    "fsdp": _DP,
    "hsdp": _DP,
    "tp": OTHER,
    "tensor": OTHER,
    "cp": OTHER,
    "context": OTHER,
    "sp": OTHER,
    "sequence": OTHER,
}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True, slots=True)
class Communication:
    """What a source says about one collective call, as far as classes go."""

    collective: str  # as the source names it: "AllReduce", "all_to_all", "ncclDevKernel_..."
    communicator: str | None = None  # NCCL's communicator id (Inspector header.id)
    group_names: tuple[str, ...] = ()  # group description, group name, NCCL comm_name
    n_ranks: int | None = None  # the group's size
    nnodes: int | None = None  # the nodes it spans (Inspector header.nnodes)


@dataclass(frozen=True, slots=True)
class Classification:
    """A class, and the rule and the evidence (mapping key, name or collective) that gave it."""

    kind: str | None  # "EP", "PP", "DP" (Coflow.kind); None: none of them, or not known
    rule: str  # MAPPING_COMMUNICATOR ... UNDECIDED
    evidence: str  # the key, name or canonical collective the rule used ("" when undecided)


# The largest group: (ranks, nodes or None).
GroupSize = tuple[int, int | None]


def canonical_collective(name: str) -> str | None:
    """NCCL's name for a collective named by any source; None when it is not one."""
    text = name.split("(", 1)[0].strip()  # a kernel's name carries its arguments
    for prefix in ("ncclDevKernel_", "ncclKernel_"):
        if text.startswith(prefix):
            text = text[len(prefix) :].split("_", 1)[0]
    if text.startswith("nccl:"):  # c10d's profiling titles
        text = text[len("nccl:") :]
    return _COLLECTIVES.get(re.sub(r"[\s_]", "", text).lower())


def name_words(name: str) -> tuple[str, ...]:
    """A group name as lower-case words, trailing digits dropped ("mesh_ep0" -> mesh, ep)."""
    spaced = _CAMEL.sub("_", name).lower()
    words = (word.rstrip("0123456789") for word in _WORD.split(spaced))
    return tuple(word for word in words if word)


def name_kind(name: str) -> str | None:
    """The class a group's name gives ("EP", "PP", "DP" or OTHER), or None if it gives none."""
    families = {_FAMILIES[word] for word in name_words(name) if word in _FAMILIES}
    if len(families) == 1:
        return families.pop()
    if _DP in families and _PP not in families:
        return _DP  # data parallel over experts, or over context/tensor ranks
    return None


def validate_mapping(mapping: Mapping[str, str]) -> None:
    """ValueError for a value that is not one of Hermod's types or OTHER."""
    allowed = {*TYPE_RANK, OTHER}
    for key, value in mapping.items():
        if value not in allowed:
            raise ValueError(f"{key!r} maps to {value!r}: not one of {sorted(allowed)}")


def largest_group(communications: Iterable[Communication]) -> GroupSize | None:
    """The size of the largest group carrying AllReduce, AllGather or ReduceScatter."""
    sizes = [
        (c.n_ranks, c.nnodes)
        for c in communications
        if c.n_ranks is not None
        and c.n_ranks >= 2
        and canonical_collective(c.collective) in _DATA_PARALLEL_COLLECTIVES
    ]
    if not sizes:
        return None
    ranks = max(n for n, _ in sizes)
    nodes = [m for n, m in sizes if n == ranks and m is not None]
    return ranks, max(nodes) if nodes else None


def classify_one(
    communication: Communication,
    mapping: Mapping[str, str] | None = None,
    largest: GroupSize | None = None,
) -> Classification:
    """The class of one collective; ``largest`` is ``largest_group`` over its peers."""
    if mapping:
        decided = _from_mapping(communication, mapping)
        if decided is not None:
            return decided
    decided = _from_names(communication.group_names)
    if decided is not None:
        return decided
    return _inferred(communication, largest)


def classify(
    communications: Sequence[Communication], mapping: Mapping[str, str] | None = None
) -> tuple[Classification, ...]:
    """The class of each collective, in order, the largest group taken over all of them."""
    if mapping:
        validate_mapping(mapping)
    largest = largest_group(communications)
    return tuple(classify_one(c, mapping, largest) for c in communications)


def _kind(value: str) -> str | None:
    return None if value == OTHER else value


def _from_mapping(
    communication: Communication, mapping: Mapping[str, str]
) -> Classification | None:
    if communication.communicator is not None:
        wanted = communication.communicator.lower()
        for key, value in mapping.items():
            if key.lower() == wanted:
                return Classification(_kind(value), MAPPING_COMMUNICATOR, key)
    for name in communication.group_names:
        if name in mapping:
            return Classification(_kind(mapping[name]), MAPPING_GROUP, name)
    return None


def _from_names(names: Sequence[str]) -> Classification | None:
    found = [(kind, name) for name in names if (kind := name_kind(name)) is not None]
    if not found or len({kind for kind, _ in found}) > 1:
        return None  # no name says anything, or the names disagree
    kind, name = found[0]
    return Classification(_kind(kind), GROUP_NAME, name)


def _inferred(communication: Communication, largest: GroupSize | None) -> Classification:
    collective = canonical_collective(communication.collective)
    if collective == ALL_TO_ALL:
        return Classification(_EP, INFERRED_ALL_TO_ALL, collective)
    if collective in _POINT_TO_POINT:
        return Classification(_PP, INFERRED_SEND_RECV, collective)
    if (
        collective in _DATA_PARALLEL_COLLECTIVES
        and largest is not None
        and communication.n_ranks == largest[0]
        and (
            largest[1] is None or communication.nnodes is None or communication.nnodes == largest[1]
        )
    ):
        return Classification(_DP, INFERRED_LARGEST_GROUP, collective)
    return Classification(None, UNDECIDED, "")
