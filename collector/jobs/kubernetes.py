"""Kubernetes jobs from the kubelet's pod-resources gRPC API: which pod holds which GPUs and NICs.

Once a second at most, ``PodResourcesJobs`` calls ``List`` (k8s.io/kubelet
pkg/apis/podresources/v1/api.proto, our copy of the protocol in collector/jobs/podresources/)
on the kubelet's Unix socket and turns every pod that holds a GPU or an RDMA device into a
``Claim``: device-plugin resources say which device IDs each container was given.

- ``nvidia.com/gpu``: GPU UUIDs (``GPU-8f6f...``), into ``Claim.gpus``; the NVIDIA device
  plugin's shared replicas read ``<uuid>::<n>`` (NVIDIA/k8s-device-plugin
  internal/rm/devices.go, ``NewAnnotatedID``) and count as the GPU itself.
- SR-IOV network device plugin resources: each device ID is the VF's PCI address
  (k8snetworkplumbingwg/sriov-network-device-plugin pkg/netdevice/pciNetDevice.go passes
  ``dev.Address``), into ``Claim.devices`` with RULE_DEVICE.
- The RDMA shared device plugin's resources (``rdma/hca_shared_devices_a``): its device IDs
  are counters, ``strconv.Itoa(id)`` (Mellanox/k8s-rdma-shared-dev-plugin
  pkg/resources/server.go), that name no NIC. The devices behind such a resource come from our
  configuration (``rdma_resources``: resource name -> RDMA device names, as the plugin's own
  config selects them), into ``Claim.devices`` with RULE_RESOURCE; an unmapped one is said
  once and gives nothing.

A pod that holds no GPU and no RDMA device holds no port and gets no claim (an empty claim
would mean the whole node). Pod-resources carries no labels, so a pod's job is
``namespace/pod`` unless an API server is configured: then the owning job's name comes from
the pod's labels or controller (``owner_from_pod``) and the pods of one owner on this node
make one job.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import logging
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from burstscope.collector.jobs.model import KUBERNETES, RULE_DEVICE, RULE_RESOURCE, Claim, Job

if TYPE_CHECKING:
    from burstscope.collector.jobs.podresources import api_pb2

_LOG = logging.getLogger(__name__)

DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# The watcher polls 4 times a second; the kubelet is asked at most once a second (it rate
# limits this API itself) and the answer in between is the last one.
POLL_SECONDS = 1.0
DEADLINE_SECONDS = 1.0  # per List call: a hung kubelet costs the watcher one second
API_TIMEOUT_SECONDS = 1.0  # per API server request (connect, and each read)
OWNER_RETRY_SECONDS = 60.0  # after a failed owner lookup, pods wait this long for another
# The kubelet's own clients allow 16 MiB answers (kubernetes test/e2e_node/util.go,
# defaultPodResourcesMaxSize); gRPC's default of 4 MiB could cut a busy node's List.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_POD_JSON_BYTES = 8 * 1024 * 1024  # a Pod object with managedFields is tens of KiB

# Which device-plugin resources count as what: fnmatch patterns on the resource name.
GPU = "gpu"
SRIOV = "sriov"
SHARED_RDMA = "shared_rdma"
DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu",)
# The SR-IOV plugin's resource names are the operator's (resourceName in its config.json,
# prefix intel.com by default, nvidia.com under NVIDIA's network operator); its examples
# and the operators' all carry "sriov".
DEFAULT_SRIOV_RESOURCES = ("*sriov*",)
# The RDMA shared device plugin's default resource prefix is "rdma" (rdmaHcaResourcePrefix,
# pkg/resources/resources_manager.go).
DEFAULT_SHARED_RDMA_RESOURCES = ("rdma/*",)

# Labels that name a pod's job, most specific first: a JobSet's pods also carry their child
# Job's batch label, a PyTorchJob's the Kubeflow one.
#   training.kubeflow.org/job-name: kubeflow/training-operator pkg/apis/kubeflow.org/v1
#     common_types.go (JobNameLabel; PyTorchJob, MPIJob, ...)
#   jobset.sigs.k8s.io/jobset-name: kubernetes-sigs/jobset api/jobset/v1alpha2 (JobSetNameKey)
#   batch.kubernetes.io/job-name, job-name (before 1.27): a Job's pods,
#     https://kubernetes.io/docs/reference/labels-annotations-taints/
OWNER_LABELS = (
    "training.kubeflow.org/job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "batch.kubernetes.io/job-name",
    "job-name",
)

_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Which resource names (fnmatch patterns) give GPUs, SR-IOV VFs and shared RDMA."""

    gpus: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    sriov: tuple[str, ...] = DEFAULT_SRIOV_RESOURCES
    shared_rdma: tuple[str, ...] = DEFAULT_SHARED_RDMA_RESOURCES

    def kind(self, resource_name: str, rdma_resources: Mapping[str, object]) -> str | None:
        """GPU, SRIOV, SHARED_RDMA, or None for a resource that holds no port."""
        if resource_name in rdma_resources:  # configured by name: the operator said so
            return SHARED_RDMA
        for kind, patterns in ((GPU, self.gpus), (SRIOV, self.sriov)):
            if any(fnmatch.fnmatchcase(resource_name, pattern) for pattern in patterns):
                return kind
        if any(fnmatch.fnmatchcase(resource_name, pattern) for pattern in self.shared_rdma):
            return SHARED_RDMA
        return None


@dataclass(frozen=True, slots=True)
class PodHolding:
    """What one pod holds, from pod-resources."""

    namespace: str  # PodResources.namespace
    pod: str  # PodResources.name
    gpus: tuple[str, ...]  # GPU IDs as the device plugin gave them (UUIDs)
    devices: tuple[tuple[str, str], ...]  # (VF PCI address or RDMA device, rule)


@dataclass(frozen=True, slots=True)
class Owner:
    """The job a pod belongs to, from the API server's Pod object."""

    name: str  # "" when neither a label nor a controller names one
    start_time: float = 0.0  # status.startTime in Unix seconds; 0 when absent


def gpu_id(device_id: str) -> str:
    """The GPU behind an NVIDIA device plugin ID: ``<uuid>::<replica>`` is the GPU ``<uuid>``
    shared by time-slicing or MPS (internal/rm/devices.go, ``AnnotatedID.GetID``)."""
    return device_id.split("::", 1)[0]


def pod_holdings(
    pods: Iterable[api_pb2.PodResources],
    names: ResourceNames,
    rdma_resources: Mapping[str, Sequence[str]],
) -> tuple[list[PodHolding], list[tuple[str, str]]]:
    """The pods that hold a GPU or an RDMA device, and the problems met, as (key, sentence):
    a key is said once (a resource name or a DRA driver, so the set stays small)."""
    holdings: list[PodHolding] = []
    problems: list[tuple[str, str]] = []
    for pod in pods:
        gpus: set[str] = set()
        devices: set[tuple[str, str]] = set()
        for container in pod.containers:
            for given in container.devices:
                resource = given.resource_name
                kind = names.kind(resource, rdma_resources)
                if kind == GPU:
                    gpus.update(gpu_id(device) for device in given.device_ids if device)
                elif kind == SRIOV:
                    for device in given.device_ids:
                        if _PCI_ADDRESS.fullmatch(device):
                            devices.add((device.lower(), RULE_DEVICE))
                        else:
                            problems.append(
                                (
                                    f"sriov {resource}",
                                    f"{resource} gave {pod.namespace}/{pod.name} the device "
                                    f"{device!r}, not a PCI address: it is not attributed",
                                )
                            )
                elif kind == SHARED_RDMA:
                    mapped = rdma_resources.get(resource)
                    if mapped is None:
                        problems.append(
                            (
                                f"shared {resource}",
                                f"{resource} is a shared RDMA resource whose device IDs name "
                                f"no NIC, and rdma_resources maps it to no device: "
                                f"{pod.namespace}/{pod.name} holds nothing through it",
                            )
                        )
                    else:
                        devices.update((device, RULE_RESOURCE) for device in mapped)
            for dynamic in container.dynamic_resources:
                for claimed in dynamic.claim_resources:
                    problems.append(
                        (
                            f"dra {claimed.driver_name}",
                            f"{pod.namespace}/{pod.name} holds devices of the DRA driver "
                            f"{claimed.driver_name!r}: DRA devices are not attributed",
                        )
                    )
        if gpus or devices:
            holdings.append(
                PodHolding(pod.namespace, pod.name, tuple(sorted(gpus)), tuple(sorted(devices)))
            )
    return holdings, problems


def claims_from(
    holdings: Sequence[PodHolding], owners: Mapping[tuple[str, str], Owner]
) -> list[Claim]:
    """One claim per job, by job id: a known owner's pods on this node merge into one job
    (``namespace/owner``); a pod whose owner is not known is its own (``namespace/pod``)."""
    groups: dict[str, list[tuple[PodHolding, Owner | None]]] = {}
    for holding in holdings:
        owner = owners.get((holding.namespace, holding.pod))
        name = owner.name if owner is not None and owner.name else holding.pod
        groups.setdefault(f"{holding.namespace}/{name}", []).append((holding, owner))
    claims = []
    for job_id, members in sorted(groups.items()):
        first, owner = members[0]
        starts = [owner.start_time for _, owner in members if owner and owner.start_time > 0]
        job = Job(
            job_id=job_id,
            scheduler=KUBERNETES,
            name=owner.name if owner is not None else "",
            start_time=min(starts, default=0.0),
            namespace=first.namespace,
            pod=",".join(sorted(holding.pod for holding, _ in members)),
        )
        gpus = {gpu for holding, _ in members for gpu in holding.gpus}
        devices = {device for holding, _ in members for device in holding.devices}
        claims.append(Claim(job, gpus=tuple(sorted(gpus)), devices=tuple(sorted(devices))))
    return claims


def owner_from_pod(document: object) -> Owner:
    """The owning job of a Pod object (GET /api/v1/namespaces/{ns}/pods/{name},
    https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/): the first
    of OWNER_LABELS in metadata.labels, else the metadata.ownerReferences entry with
    ``controller: true`` (its ``name``;
    https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/).
    Raises ValueError for a document that is not a Pod object."""
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        raise ValueError("not a Pod object (no metadata)")
    metadata: dict[str, Any] = document["metadata"]
    labels = metadata.get("labels") or {}
    references = metadata.get("ownerReferences") or []
    if not isinstance(labels, dict) or not isinstance(references, list):
        raise ValueError("metadata.labels or metadata.ownerReferences has the wrong type")
    name = next((labels[key] for key in OWNER_LABELS if isinstance(labels.get(key), str)), "")
    if not name:
        name = next(
            (
                reference["name"]
                for reference in references
                if isinstance(reference, dict)
                and reference.get("controller") is True
                and isinstance(reference.get("name"), str)
            ),
            "",
        )
    status = document.get("status")
    started = status.get("startTime") if isinstance(status, dict) else None
    start_time = 0.0
    if isinstance(started, str):
        try:
            start_time = datetime.fromisoformat(started).timestamp()  # RFC 3339, ...Z
        except ValueError:
            start_time = 0.0  # a start we cannot read is not known, not a bad pod
    return Owner(name, start_time)


class PodOwners:
    """Pods' owners from the API server, read with a service account's token, cached per pod
    (a pod never changes owner) while the kubelet lists it."""

    def __init__(
        self,
        url: str,
        token_file: str,
        ca_file: str | None = None,
        timeout_seconds: float = API_TIMEOUT_SECONDS,
        retry_seconds: float = OWNER_RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"kubernetes_api {url!r}: not an https:// URL")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            # The token would cross the network in the clear.
            raise ValueError(f"kubernetes_api {url!r}: http:// only to loopback; use https://")
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.timeout_seconds = timeout_seconds
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.failures = 0
        self.requests = 0
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if parts.scheme == "https":
            handlers.append(
                urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file))
            )
        # No proxy: the API server is reached directly, whatever *_proxy the agent inherits.
        self._opener = urllib.request.build_opener(*handlers)
        self._cache: dict[tuple[str, str], Owner] = {}
        self._retry_at = float("-inf")
        self._failing = False
        self.pending = False  # a listed pod's owner is still to be read

    def owners(self, pods: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Owner]:
        """The known owners of ``pods``; a pod not read yet (API server failing) is absent."""
        listed = set(pods)
        for gone in [pod for pod in self._cache if pod not in listed]:
            del self._cache[gone]
        for pod in pods:
            if pod in self._cache or self.clock() < self._retry_at:
                continue
            try:
                self._cache[pod] = self._read(*pod)
            except (OSError, ValueError) as error:  # urllib's errors are OSErrors
                self.failures += 1
                self._retry_at = self.clock() + self.retry_seconds
                if not self._failing:
                    _LOG.warning(
                        "jobs: Kubernetes API server %s failed reading pod %s/%s (%s): pods "
                        "are labelled namespace/pod, owners read again every %.0f s",
                        self.url,
                        *pod,
                        error,
                        self.retry_seconds,
                    )
                self._failing = True
                break  # one failure a poll: the watcher's thread waits on no more of them
            if self._failing:
                _LOG.info("jobs: Kubernetes API server %s answers again", self.url)
                self._failing = False
        self.pending = any(pod not in self._cache for pod in listed)
        return {pod: self._cache[pod] for pod in pods if pod in self._cache}

    def _read(self, namespace: str, pod: str) -> Owner:
        quoted = (urllib.parse.quote(part, safe="") for part in (namespace, pod))
        url = "{}/api/v1/namespaces/{}/pods/{}".format(self.url, *quoted)
        # Read each time: projected service-account tokens are rotated by the kubelet.
        token = Path(self.token_file).read_text().strip()
        request = urllib.request.Request(
            url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
        )
        self.requests += 1
        try:
            with self._opener.open(request, timeout=self.timeout_seconds) as answer:
                body = answer.read(MAX_POD_JSON_BYTES + 1)
        except urllib.error.HTTPError as error:
            if error.code == 404:  # gone between the kubelet's List and this read
                return Owner("")
            raise OSError(f"HTTP {error.code} {error.reason}") from error
        if len(body) > MAX_POD_JSON_BYTES:
            raise ValueError(f"Pod object over {MAX_POD_JSON_BYTES} bytes")
        return owner_from_pod(json.loads(body))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _load_client() -> tuple[Any, Any, Any] | str:
    """grpc and the generated modules, or why they cannot load."""
    # gRPC's C core writes its own INFO lines to stderr (a GOAWAY at each kubelet restart)
    # beside the one line this module says; the operator's GRPC_VERBOSITY still wins.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        import grpc

        from burstscope.collector.jobs.podresources import api_pb2, api_pb2_grpc
    # ImportError without the extra; the generated code raises VersionError (protobuf) or
    # RuntimeError (grpcio) when the runtime is older than the code: each means "off".
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return grpc, api_pb2, api_pb2_grpc


class PodResourcesJobs:
    """The kubelet's pods as job claims; a JobSource (collector.jobs.model)."""

    name = "kubernetes"

    def __init__(
        self,
        socket_path: str = DEFAULT_KUBELET_SOCKET,
        *,
        rdma_resources: Mapping[str, Sequence[str]] | None = None,
        api: str | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
        resource_names: ResourceNames = ResourceNames(),
        poll_seconds: float = POLL_SECONDS,
        deadline_seconds: float = DEADLINE_SECONDS,
        api_timeout_seconds: float = API_TIMEOUT_SECONDS,
        owner_retry_seconds: float = OWNER_RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if api is not None and token_file is None:
            raise ValueError("kubernetes_api needs kubernetes_token_file (a read-only token)")
        self.socket_path = socket_path
        self.rdma_resources = {
            name: tuple(devices) for name, devices in (rdma_resources or {}).items()
        }
        self.resource_names = resource_names
        self.poll_seconds = poll_seconds
        self.deadline_seconds = deadline_seconds
        self.clock = clock
        self.owners = (
            PodOwners(api, token_file, ca_file, api_timeout_seconds, owner_retry_seconds, clock)
            if api is not None and token_file is not None
            else None
        )
        self.calls = 0  # List calls made
        self.failures = 0  # List calls that failed
        self.problems = 0  # resources (or DRA drivers) whose devices could not be attributed
        self._said: set[str] = set()
        self._channel: Any = None
        self._stub: Any = None
        self._next_call = float("-inf")
        self._answer: list[Claim] = []
        self._last_response: bytes | None = None
        self._failing = False
        client = _load_client()
        if isinstance(client, str):
            self._client: tuple[Any, Any, Any] | None = None
            _LOG.warning(
                "jobs: Kubernetes jobs off: the pod-resources client cannot load (%s; "
                "pip install 'burstscope[kubernetes]')",
                client,
            )
        else:
            self._client = client
        self._waiting = self._client is not None and not os.path.exists(socket_path)
        if self._waiting:
            _LOG.info(
                "jobs: Kubernetes jobs off: no kubelet pod-resources socket at %s "
                "(checked once a second)",
                socket_path,
            )

    @property
    def off(self) -> bool:
        """True while this source can read nothing: no grpcio, or no socket yet."""
        return self._client is None or self._waiting

    def poll(self) -> list[Claim] | None:
        if self._client is None:
            return []
        now = self.clock()
        if now < self._next_call:
            return self._answer
        self._next_call = now + self.poll_seconds
        if self._waiting:
            if not os.path.exists(self.socket_path):
                return []
            self._waiting = False
            _LOG.info(
                "jobs: kubelet pod-resources socket %s appeared: Kubernetes jobs on",
                self.socket_path,
            )
        response = self._list()
        if response is None:
            return None
        raw = response.SerializeToString(deterministic=True)
        if raw == self._last_response and not (self.owners and self.owners.pending):
            return self._answer  # cheap when nothing changed: no mapping, no API server
        self._last_response = raw
        holdings, problems = pod_holdings(
            response.pod_resources, self.resource_names, self.rdma_resources
        )
        for key, sentence in problems:
            if key not in self._said:
                self._said.add(key)
                self.problems += 1
                _LOG.warning("jobs: %s", sentence)
        owners = self.owners.owners([(h.namespace, h.pod) for h in holdings]) if self.owners else {}
        self._answer = claims_from(holdings, owners)
        return self._answer

    def close(self) -> None:
        self._disconnect()

    def _list(self) -> api_pb2.ListPodResourcesResponse | None:
        assert self._client is not None
        grpc, messages, services = self._client
        self.calls += 1
        try:
            if self._stub is None:
                self._channel = grpc.insecure_channel(
                    f"unix:{self.socket_path}",
                    options=[
                        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                        ("grpc.enable_http_proxy", 0),
                    ],
                )
                self._stub = services.PodResourcesListerStub(self._channel)
            response: api_pb2.ListPodResourcesResponse = self._stub.List(
                messages.ListPodResourcesRequest(), timeout=self.deadline_seconds
            )
        except grpc.RpcError as error:
            self.failures += 1
            # A fresh channel next time: no waiting out gRPC's reconnect backoff (up to
            # 120 s) once the kubelet is back.
            self._disconnect()
            if not self._failing:
                _LOG.warning(
                    "jobs: kubelet pod-resources at %s unavailable (%s): keeping the last "
                    "answer until it answers again",
                    self.socket_path,
                    _rpc_error(error),
                )
            self._failing = True
            return None
        if self._failing:
            _LOG.info("jobs: kubelet pod-resources at %s answers again", self.socket_path)
            self._failing = False
        return response

    def _disconnect(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None


def _rpc_error(error: Any) -> str:
    code = getattr(error, "code", None)
    details = getattr(error, "details", None)
    if callable(code) and callable(details):
        return f"{code().name}: {details()}"
    return str(error)
