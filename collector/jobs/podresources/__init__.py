"""The kubelet's pod-resources v1 protocol: our .proto and the Python modules generated from it.

``api.proto`` is our own text of k8s.io/kubelet ``pkg/apis/podresources/v1/api.proto`` (tag
v0.36.3, Kubernetes v1.36.3), the same on the wire: package ``v1``, service
``PodResourcesLister`` (List, GetAllocatableResources, Get), the same field numbers and types.
``api_pb2.py``, ``api_pb2.pyi`` and ``api_pb2_grpc.py`` are generated, never edited; they are
committed so that a node needs only the runtime (``pip install 'burstscope[kubernetes]'``:
grpcio and protobuf), not the compiler. Regenerate them from the repository root with the
grpcio-tools version pinned in the ``test`` extra (tests/test_jobs_kubernetes.py checks that
the committed files are what it writes)::

    .venv/bin/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \\
        --grpc_python_out=. burstscope/collector/jobs/podresources/api.proto

The path goes through the ``burstscope/collector`` link so that the generated modules import
each other as ``burstscope.collector.jobs.podresources``. Nothing here is imported at agent
start: collector.jobs.kubernetes loads these modules (and grpc) when a source is made, and
says once that the source is off when they cannot load.
"""

# The generated code checks the runtime it finds: api_pb2.py wants protobuf >= the gencode
# version (7.35.1, same major) and api_pb2_grpc.py grpcio >= the grpcio-tools that wrote it.
GENERATED_BY = "grpcio-tools 1.85.1 (libprotoc 35.1)"
