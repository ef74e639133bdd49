"""The Kubernetes job source against a kubelet serving podresources/v1 and a loopback API server.

The kubelet is a real gRPC server on a Unix socket, built from our api.proto (the published
protocol's wire form); the API server is http.server on 127.0.0.1 checking the bearer token.
Time is a fake clock wherever the source waits, so nothing here sleeps.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest

from burstscope.collector.jobs.kubernetes import (
    Owner,
    PodOwners,
    PodResourcesJobs,
    ResourceNames,
    gpu_id,
    owner_from_pod,
)
from burstscope.collector.jobs.model import KUBERNETES, RULE_DEVICE, RULE_RESOURCE, Claim, Job
from burstscope.collector.jobs.podresources import api_pb2, api_pb2_grpc

REPO = Path(__file__).resolve().parent.parent
PROTO = "burstscope/collector/jobs/podresources/api.proto"
LOGGER = "burstscope.collector.jobs.kubernetes"
SHARED = {"rdma/hca_shared_devices_a": ["mlx5_0", "mlx5_1"]}
TOKEN = "s3cret-token"


def pod(namespace: str, name: str, *given: tuple[str, list[str]]) -> api_pb2.PodResources:
    """A pod with one container holding ``given`` (resource name, device IDs) and two CPUs."""
    devices = [api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in given]
    container = api_pb2.ContainerResources(name="main", devices=devices, cpu_ids=[2, 3])
    return api_pb2.PodResources(name=name, namespace=namespace, containers=[container])


class Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    """The kubelet's PodResourcesLister, serving whatever ``pods`` holds at each call."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], api_pb2.PodResources] = {}
        self.calls = 0
        self.hang = threading.Event()  # set: List blocks until ``release`` is set
        self.release = threading.Event()
        self._server: Any = None

    def put(self, *pods: api_pb2.PodResources) -> None:
        for item in pods:
            self.pods[(item.namespace, item.name)] = item

    def List(self, request: Any, context: Any) -> api_pb2.ListPodResourcesResponse:
        self.calls += 1
        if self.hang.is_set():
            self.release.wait(10)
        return api_pb2.ListPodResourcesResponse(pod_resources=list(self.pods.values()))

    def Get(self, request: Any, context: Any) -> api_pb2.GetPodResourcesResponse:
        found = self.pods.get((request.pod_namespace, request.pod_name))
        if found is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")
        return api_pb2.GetPodResourcesResponse(pod_resources=found)

    def GetAllocatableResources(
        self, request: Any, context: Any
    ) -> api_pb2.AllocatableResourcesResponse:
        return api_pb2.AllocatableResourcesResponse(cpu_ids=[0, 1, 2, 3])

    def start(self, socket_path: Path) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix:{socket_path}")
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self.release.set()
            self._server.stop(None).wait()
            self._server = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ApiServer:
    """GET /api/v1/namespaces/{ns}/pods/{name} from ``pods``, for the bearer TOKEN only."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[str] = []
        self.status = 200
        self.body: bytes | None = None  # served instead of the pod's JSON when set
        self.hang = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                if server.hang.is_set():
                    server.release.wait(10)
                parts = self.path.split("/")
                found = None
                if len(parts) == 7 and parts[1:4] == ["api", "v1", "namespaces"]:
                    found = server.pods.get((parts[4], parts[6]))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._answer(401, b'{"kind": "Status", "code": 401}')
                elif server.status != 200:
                    self._answer(server.status, b'{"kind": "Status"}')
                elif server.body is not None:
                    self._answer(200, server.body)
                elif found is None:
                    self._answer(404, b'{"kind": "Status", "code": 404}')
                else:
                    self._answer(200, json.dumps(found).encode())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def put(self, namespace: str, name: str, **metadata: Any) -> None:
        start = metadata.pop("start", None)
        document: dict[str, Any] = {"kind": "Pod", "apiVersion": "v1"}
        document["metadata"] = {"name": name, "namespace": namespace, **metadata}
        if start is not None:
            document["status"] = {"startTime": start}
        self.pods[(namespace, name)] = document

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "kubelet.sock"
    if len(str(path)) < 100:  # a Unix socket's path must fit sun_path's 108 bytes
        yield path
        return
    short = Path(tempfile.mkdtemp(prefix="bs-k8s-"))
    yield short / "kubelet.sock"
    shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def kubelet(socket_path: Path) -> Iterator[Kubelet]:
    served = Kubelet()
    served.start(socket_path)
    yield served
    served.stop()


@pytest.fixture
def api_server() -> Iterator[ApiServer]:
    server = ApiServer()
    yield server
    server.close()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def job(job_id: str, namespace: str, pods: str, name: str = "", start: float = 0.0) -> Job:
    return Job(job_id, KUBERNETES, name=name, namespace=namespace, pod=pods, start_time=start)


def lines(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and words in r.getMessage()]


# --- the protocol ---------------------------------------------------------------------------


def test_generated_modules_are_what_the_proto_gives(tmp_path: Path) -> None:
    """The committed api_pb2*.py(i) are protoc's output for api.proto (command: module doc)."""
    outputs = [f"--{kind}_out={tmp_path}" for kind in ("python", "pyi", "grpc_python")]
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", *outputs, PROTO], cwd=REPO, check=True
    )
    folder = REPO / "collector/jobs/podresources"
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        written = (tmp_path / "burstscope/collector/jobs/podresources" / name).read_text()
        assert written == (folder / name).read_text(), f"{name}: regenerate (see __init__.py)"


def test_the_wire_names_and_numbers_of_the_published_protocol() -> None:
    """What the kubelet matches on: the method paths and the field numbers we read
    (k8s.io/kubelet pkg/apis/podresources/v1/api.proto)."""
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [f"/{service.full_name}/{m.name}" for m in service.methods] == [
        "/v1.PodResourcesLister/List",
        "/v1.PodResourcesLister/GetAllocatableResources",
        "/v1.PodResourcesLister/Get",
    ]
    numbers = {
        (message, name): api_pb2.DESCRIPTOR.message_types_by_name[message]
        .fields_by_name[name]
        .number
        for message, name in [
            ("ListPodResourcesResponse", "pod_resources"),
            ("PodResources", "name"),
            ("PodResources", "namespace"),
            ("PodResources", "containers"),
            ("ContainerResources", "devices"),
            ("ContainerResources", "dynamic_resources"),
            ("ContainerDevices", "resource_name"),
            ("ContainerDevices", "device_ids"),
            ("GetPodResourcesRequest", "pod_name"),
            ("GetPodResourcesRequest", "pod_namespace"),
        ]
    }
    assert list(numbers.values()) == [1, 1, 2, 3, 2, 5, 1, 2, 1, 2]


def test_the_test_kubelet_serves_get_and_allocatable(socket_path: Path, kubelet: Kubelet) -> None:
    kubelet.put(pod("ml", "a", ("nvidia.com/gpu", ["GPU-1"])))
    with grpc.insecure_channel(f"unix:{socket_path}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        got = stub.Get(api_pb2.GetPodResourcesRequest(pod_name="a", pod_namespace="ml"))
        assert got.pod_resources.containers[0].devices[0].device_ids == ["GPU-1"]
        assert stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest()).cpu_ids == [
            0,
            1,
            2,
            3,
        ]


# --- pods to claims -------------------------------------------------------------------------


def test_pods_appearing_and_going(socket_path: Path, kubelet: Kubelet) -> None:
    kubelet.put(
        pod("ml", "train-0", ("nvidia.com/gpu", ["GPU-aaaa", "GPU-bbbb::1"])),
        pod(
            "net",
            "vf-pod",
            ("nvidia.com/gpu", ["GPU-cccc"]),
            ("intel.com/intel_sriov_netdevice", ["0000:AF:06.1"]),
        ),
        pod("ml", "shared", ("nvidia.com/gpu", ["GPU-dddd"]), ("rdma/hca_shared_devices_a", ["7"])),
        pod("kube-system", "daemon"),  # CPUs only: holds no port
        pod("ml", "fpga", ("example.com/fpga", ["fpga0"])),  # nothing we attribute
    )
    source = PodResourcesJobs(str(socket_path), rdma_resources=SHARED, poll_seconds=0)
    assert not source.off
    shared = (("mlx5_0", RULE_RESOURCE), ("mlx5_1", RULE_RESOURCE))
    assert source.poll() == [
        Claim(job("ml/shared", "ml", "shared"), gpus=("GPU-dddd",), devices=shared),
        Claim(job("ml/train-0", "ml", "train-0"), gpus=("GPU-aaaa", "GPU-bbbb")),
        Claim(
            job("net/vf-pod", "net", "vf-pod"),
            gpus=("GPU-cccc",),
            devices=(("0000:af:06.1", RULE_DEVICE),),
        ),
    ]
    del kubelet.pods[("ml", "train-0")]
    del kubelet.pods[("net", "vf-pod")]
    kubelet.put(pod("ml", "train-1", ("nvidia.com/gpu", ["GPU-aaaa"])))
    assert source.poll() == [
        Claim(job("ml/shared", "ml", "shared"), gpus=("GPU-dddd",), devices=shared),
        Claim(job("ml/train-1", "ml", "train-1"), gpus=("GPU-aaaa",)),
    ]
    kubelet.pods.clear()
    assert source.poll() == []
    assert (kubelet.calls, source.calls, source.failures) == (3, 3, 0)
    source.close()


def test_which_resources_count_is_configurable(socket_path: Path, kubelet: Kubelet) -> None:
    kubelet.put(
        pod("ml", "a", ("amd.com/gpu", ["0000:c1:00.0"]), ("acme.io/vf", ["0000:41:00.2"])),
        pod("ml", "b", ("nvidia.com/gpu", ["GPU-1"])),
    )
    names = ResourceNames(gpus=("amd.com/gpu",), sriov=("acme.io/vf",), shared_rdma=())
    source = PodResourcesJobs(str(socket_path), resource_names=names, poll_seconds=0)
    assert source.poll() == [
        Claim(
            job("ml/a", "ml", "a"),
            gpus=("0000:c1:00.0",),
            devices=(("0000:41:00.2", RULE_DEVICE),),
        )
    ]
    source.close()


def test_devices_that_name_nothing_are_said_once(
    socket_path: Path, kubelet: Kubelet, caplog: pytest.LogCaptureFixture
) -> None:
    dra = api_pb2.DynamicResource(
        claim_name="gpus",
        claim_namespace="ml",
        claim_resources=[api_pb2.ClaimResource(driver_name="gpu.example.com", device_name="g0")],
    )
    with_dra = pod("ml", "dra", ("nvidia.com/gpu", ["GPU-3"]))
    with_dra.containers[0].dynamic_resources.append(dra)
    kubelet.put(
        # An auxiliary network device (a subfunction) is named, not addressed.
        pod("ml", "sf", ("nvidia.com/gpu", ["GPU-1"]), ("nvidia.com/sriov_sf", ["mlx5_core.sf.4"])),
        pod("ml", "unmapped", ("rdma/hca_shared_devices_b", ["0"])),
        with_dra,
    )
    source = PodResourcesJobs(str(socket_path), rdma_resources=SHARED, poll_seconds=0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first = source.poll()
        kubelet.put(pod("ml", "other", ("rdma/hca_shared_devices_b", ["1"])))
        second = source.poll()
    expected = [
        Claim(job("ml/dra", "ml", "dra"), gpus=("GPU-3",)),
        Claim(job("ml/sf", "ml", "sf"), gpus=("GPU-1",)),
    ]
    assert (first, second) == (expected, expected)
    assert len(lines(caplog, "not a PCI address")) == 1
    assert len(lines(caplog, "rdma_resources maps it to no device")) == 1
    assert len(lines(caplog, "DRA devices are not attributed")) == 1
    assert source.problems == 3
    source.close()


def test_gpu_ids_with_replicas_are_the_gpu() -> None:
    assert [gpu_id(i) for i in ("GPU-1", "GPU-1::0", "GPU-1::12", "0")] == [
        "GPU-1",
        "GPU-1",
        "GPU-1",
        "0",
    ]


def test_the_kubelet_is_asked_once_a_second(socket_path: Path, kubelet: Kubelet) -> None:
    kubelet.put(pod("ml", "a", ("nvidia.com/gpu", ["GPU-1"])))
    clock = Clock()
    source = PodResourcesJobs(str(socket_path), clock=clock)
    first = source.poll()
    kubelet.put(pod("ml", "b", ("nvidia.com/gpu", ["GPU-2"])))
    for _ in range(3):  # the watcher's 4 polls a second
        clock.now += 0.25
        assert source.poll() is first
    assert kubelet.calls == 1
    clock.now += 0.25
    assert [claim.job.job_id for claim in source.poll() or []] == ["ml/a", "ml/b"]
    clock.now += 1.0
    second = source.poll()
    clock.now += 1.0
    assert source.poll() is second  # the same answer again: the same claims, not rebuilt
    assert kubelet.calls == 4
    source.close()


# --- a kubelet that is not there, goes away, or hangs ---------------------------------------


def test_no_socket_is_off_until_one_appears(
    socket_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        source = PodResourcesJobs(str(socket_path), clock=clock)
        assert source.off
        for _ in range(3):
            assert source.poll() == []
            clock.now += 1.0
    assert len(lines(caplog, "no kubelet pod-resources socket")) == 1
    assert source.calls == 0
    kubelet = Kubelet()
    kubelet.put(pod("ml", "a", ("nvidia.com/gpu", ["GPU-1"])))
    kubelet.start(socket_path)
    try:
        assert source.poll() == [Claim(job("ml/a", "ml", "a"), gpus=("GPU-1",))]
        assert not source.off
    finally:
        kubelet.stop()
        source.close()


def test_a_kubelet_that_goes_away_and_returns(
    socket_path: Path, kubelet: Kubelet, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet.put(pod("ml", "a", ("nvidia.com/gpu", ["GPU-1"])))
    clock = Clock()
    source = PodResourcesJobs(str(socket_path), clock=clock)
    claims = [Claim(job("ml/a", "ml", "a"), gpus=("GPU-1",))]
    assert source.poll() == claims
    kubelet.stop()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(2):
            clock.now += 1.0
            assert source.poll() is None  # the watcher keeps the previous claims
        clock.now += 0.5
        assert source.poll() == claims  # between calls: the last answer, not a new failure
        restarted = Kubelet()
        restarted.put(pod("ml", "a", ("nvidia.com/gpu", ["GPU-1"])))
        restarted.put(pod("ml", "b", ("nvidia.com/gpu", ["GPU-2"])))
        restarted.start(socket_path)
        try:
            # The first call on a fresh channel can miss its 1 s deadline on a loaded machine
            # (seen beside two CPU hogs); the watcher then tries again at its next poll, as
            # here, until the kubelet answers.
            retries, deadline = 0, time.monotonic() + 60
            while True:
                clock.now += 1.0
                answer = source.poll()
                if answer is not None or time.monotonic() > deadline:
                    break
                retries += 1
            assert [c.job.job_id for c in answer or []] == ["ml/a", "ml/b"]
        finally:
            restarted.stop()
    assert len(lines(caplog, "unavailable")) == 1
    assert len(lines(caplog, f"{socket_path} answers again")) == 1
    assert source.failures == 2 + retries
    source.close()


def test_a_hung_kubelet_costs_one_deadline(
    socket_path: Path, kubelet: Kubelet, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet.hang.set()
    source = PodResourcesJobs(str(socket_path), deadline_seconds=0.2, poll_seconds=0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert source.poll() is None
    assert time.monotonic() - started < 2.0
    assert "DEADLINE_EXCEEDED" in lines(caplog, "unavailable")[0]
    source.close()


def test_without_grpcio_the_source_is_off(
    socket_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc raises ImportError
    with caplog.at_level(logging.INFO, logger=LOGGER):
        source = PodResourcesJobs(str(socket_path))
        assert source.poll() == []
    assert source.off
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "jobs: Kubernetes jobs off: the pod-resources client cannot load (ModuleNotFoundError: "
        "import of grpc halted; None in sys.modules; pip install 'burstscope[kubernetes]')"
    ]
    source.close()


def test_an_older_protobuf_runtime_is_off_too(
    socket_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The generated code refuses a runtime older than itself: that is "off", not a crash."""
    from google.protobuf import runtime_version

    def refuse(*args: object) -> None:
        raise runtime_version.VersionError("gencode 7.35.1 runtime 7.0.0")

    package = "burstscope.collector.jobs.podresources"
    for module in ("api_pb2", "api_pb2_grpc"):
        monkeypatch.delitem(sys.modules, f"{package}.{module}")
        monkeypatch.delattr(sys.modules[package], module)
    monkeypatch.setattr(runtime_version, "ValidateProtobufRuntimeVersion", refuse)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        source = PodResourcesJobs(str(socket_path))
    assert source.off and source.poll() == []
    assert len(lines(caplog, "cannot load (VersionError: gencode 7.35.1 runtime 7.0.0")) == 1


def test_the_module_imports_without_grpc_or_protobuf() -> None:
    """The agent imports this module at start: without the extra it still imports."""
    script = (
        "import sys\n"
        "sys.modules['grpc'] = sys.modules['google.protobuf'] = None\n"
        "from burstscope.collector.jobs.kubernetes import PodResourcesJobs\n"
        "source = PodResourcesJobs('/nonexistent/kubelet.sock')\n"
        "assert source.off and source.poll() == []\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True)


# --- owners from the API server -------------------------------------------------------------


def test_owners_merge_pods_into_their_job(
    socket_path: Path, kubelet: Kubelet, api_server: ApiServer, token_file: Path
) -> None:
    kubeflow = {"training.kubeflow.org/job-name": "llama"}
    api_server.put("ml", "llama-worker-0", labels=kubeflow, start="2026-03-01T10:00:05Z")
    api_server.put("ml", "llama-worker-1", labels=kubeflow, start="2026-03-01T10:00:00Z")
    api_server.put(
        "ml",
        "js-trainer-0-0-x1",
        labels={"jobset.sigs.k8s.io/jobset-name": "js", "batch.kubernetes.io/job-name": "js-t-0"},
    )
    api_server.put(
        "ml",
        "serve-5d8f-abcde",
        ownerReferences=[
            {"kind": "Lease", "name": "not-this", "controller": False},
            {"kind": "ReplicaSet", "name": "serve-5d8f", "controller": True},
        ],
    )
    api_server.put("ml", "lonely")
    # ml/gone: the API server answers 404 (deleted between the List and the read).
    gpu = "nvidia.com/gpu"
    kubelet.put(
        pod("ml", "llama-worker-1", (gpu, ["GPU-2"])),
        pod("ml", "llama-worker-0", (gpu, ["GPU-1"]), ("rdma/hca_shared_devices_a", ["0"])),
        pod("ml", "js-trainer-0-0-x1", (gpu, ["GPU-3"])),
        pod("ml", "serve-5d8f-abcde", (gpu, ["GPU-4"])),
        pod("ml", "lonely", (gpu, ["GPU-5"])),
        pod("ml", "gone", (gpu, ["GPU-6"])),
        pod("ml", "cpu-only"),  # holds nothing: its owner is never asked for
    )
    source = PodResourcesJobs(
        str(socket_path),
        rdma_resources=SHARED,
        api=api_server.url,
        token_file=str(token_file),
        poll_seconds=0,
    )
    shared = (("mlx5_0", RULE_RESOURCE), ("mlx5_1", RULE_RESOURCE))
    expected = [
        Claim(job("ml/gone", "ml", "gone"), gpus=("GPU-6",)),
        Claim(job("ml/js", "ml", "js-trainer-0-0-x1", name="js"), gpus=("GPU-3",)),
        Claim(
            job("ml/llama", "ml", "llama-worker-0,llama-worker-1", "llama", 1772359200.0),
            gpus=("GPU-1", "GPU-2"),
            devices=shared,
        ),
        Claim(job("ml/lonely", "ml", "lonely"), gpus=("GPU-5",)),
        Claim(job("ml/serve-5d8f", "ml", "serve-5d8f-abcde", name="serve-5d8f"), gpus=("GPU-4",)),
    ]
    assert source.poll() == expected
    assert len(api_server.requests) == 6
    assert all("cpu-only" not in path for path in api_server.requests)
    # Cached per pod: a change in the List asks only for the new pod.
    api_server.put("ml", "llama-worker-2", labels=kubeflow)
    kubelet.put(pod("ml", "llama-worker-2", (gpu, ["GPU-7"])))
    claims = source.poll() or []
    assert claims[2].job.pod == "llama-worker-0,llama-worker-1,llama-worker-2"
    assert claims[2].gpus == ("GPU-1", "GPU-2", "GPU-7")
    assert api_server.requests[6:] == ["/api/v1/namespaces/ml/pods/llama-worker-2"]
    # A pod the kubelet stops listing leaves the cache: back again, it is read again.
    lonely = kubelet.pods.pop(("ml", "lonely"))
    source.poll()
    kubelet.put(lonely)
    source.poll()
    assert api_server.requests[7:] == ["/api/v1/namespaces/ml/pods/lonely"]
    assert source.owners is not None and source.owners.failures == 0
    source.close()


def test_a_failing_api_server_labels_namespace_and_pod(
    socket_path: Path,
    kubelet: Kubelet,
    api_server: ApiServer,
    token_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api_server.put("ml", "w-0", labels={"batch.kubernetes.io/job-name": "train"})
    api_server.put("ml", "w-1", labels={"batch.kubernetes.io/job-name": "train"})
    kubelet.put(
        pod("ml", "w-0", ("nvidia.com/gpu", ["GPU-1"])),
        pod("ml", "w-1", ("nvidia.com/gpu", ["GPU-2"])),
    )
    api_server.status = 500
    clock = Clock()
    source = PodResourcesJobs(
        str(socket_path), api=api_server.url, token_file=str(token_file), clock=clock
    )
    fallback = [
        Claim(job("ml/w-0", "ml", "w-0"), gpus=("GPU-1",)),
        Claim(job("ml/w-1", "ml", "w-1"), gpus=("GPU-2",)),
    ]
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert source.poll() == fallback
        assert len(api_server.requests) == 1  # one failure a poll, then it waits
        for _ in range(5):
            clock.now += 1.0
            assert source.poll() == fallback
        assert len(api_server.requests) == 1
        api_server.status = 200
        clock.now += 60.0
        merged = Claim(job("ml/train", "ml", "w-0,w-1", "train"), gpus=("GPU-1", "GPU-2"))
        assert source.poll() == [merged]
    assert len(lines(caplog, "failed reading pod ml/w-0 (HTTP 500")) == 1
    assert len(lines(caplog, "answers again")) == 1
    assert source.owners is not None and source.owners.failures == 1
    source.close()


@pytest.mark.parametrize(
    ("body", "token", "said"),
    [
        (None, "wrong-token", "HTTP 401"),
        (None, None, "No such file or directory"),  # no token file (the secret not mounted)
        (b"<html>not json</html>", TOKEN, "Expecting value"),
        (b"[]", TOKEN, "not a Pod object"),
        (b'{"metadata": {"labels": ["a"]}}', TOKEN, "wrong type"),
    ],
)
def test_bad_answers_from_the_api_server(
    socket_path: Path,
    kubelet: Kubelet,
    api_server: ApiServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    body: bytes | None,
    token: str | None,
    said: str,
) -> None:
    api_server.put("ml", "w-0", labels={"job-name": "train"})
    api_server.body = body
    kubelet.put(pod("ml", "w-0", ("nvidia.com/gpu", ["GPU-1"])))
    if token is not None:
        (tmp_path / "bad-token").write_text(token)
    source = PodResourcesJobs(
        str(socket_path), api=api_server.url, token_file=str(tmp_path / "bad-token")
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert source.poll() == [Claim(job("ml/w-0", "ml", "w-0"), gpus=("GPU-1",))]
    assert len(lines(caplog, said)) == 1
    source.close()


def test_a_hung_api_server_costs_one_timeout(
    socket_path: Path, kubelet: Kubelet, api_server: ApiServer, token_file: Path
) -> None:
    api_server.hang.set()
    kubelet.put(
        pod("ml", "a", ("nvidia.com/gpu", ["GPU-1"])), pod("ml", "b", ("nvidia.com/gpu", ["GPU-2"]))
    )
    source = PodResourcesJobs(
        str(socket_path), api=api_server.url, token_file=str(token_file), api_timeout_seconds=0.2
    )
    started = time.monotonic()
    assert [c.job.job_id for c in source.poll() or []] == ["ml/a", "ml/b"]
    assert time.monotonic() - started < 2.0
    assert source.owners is not None and source.owners.failures == 1
    source.close()


def test_api_settings_that_are_refused(token_file: Path) -> None:
    with pytest.raises(ValueError, match="needs kubernetes_token_file"):
        PodResourcesJobs("/nonexistent.sock", api="https://10.0.0.1:6443")
    with pytest.raises(ValueError, match="only to loopback"):
        PodOwners("http://10.0.0.1:6443", str(token_file))
    with pytest.raises(ValueError, match="not an https:// URL"):
        PodOwners("ftp://10.0.0.1", str(token_file))


@pytest.mark.parametrize(
    ("document", "owner"),
    [
        (
            {
                "metadata": {
                    "labels": {
                        "batch.kubernetes.io/job-name": "child",
                        "jobset.sigs.k8s.io/jobset-name": "parent",
                    },
                    "ownerReferences": [{"name": "child", "controller": True}],
                },
                "status": {"startTime": "1970-01-01T00:01:00Z"},
            },
            Owner("parent", 60.0),
        ),
        ({"metadata": {"labels": {"job-name": "old"}}}, Owner("old")),
        ({"metadata": {"ownerReferences": [{"name": "x"}]}}, Owner("")),
        ({"metadata": {}, "status": {"startTime": "yesterday"}}, Owner("")),
    ],
)
def test_owner_from_pod(document: dict[str, Any], owner: Owner) -> None:
    assert owner_from_pod(document) == owner
