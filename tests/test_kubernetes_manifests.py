"""deploy/kubernetes/: every overlay renders, validates, scans clean and says what it promises.

Rendered with `kubectl kustomize` (kustomize 5.5 inside kubectl 1.32), validated with
kubernetes-validate --strict (PyPI; the Kubernetes OpenAPI schemas, offline), the
prometheus-operator objects it has no schema for checked against the fields
prometheus-operator's API reference documents (Documentation/api-reference/api.md, v0.93:
ServiceMonitorSpec, Endpoint, PodMonitorSpec, PodMetricsEndpoint, RelabelConfig,
PrometheusRuleSpec, RuleGroup, Rule) with the small schema below, the rule groups run
through `promtool check rules`, and the whole rendering scanned with checkov in .venv-checkov
(`make test` creates it). Everything renders once per module: the file takes seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from burstscope.cli import build_parser, main
from tests.conftest import integration_unavailable, require_binary

REPOSITORY = Path(__file__).resolve().parent.parent
KUSTOMIZE = REPOSITORY / "deploy" / "kubernetes"
OVERLAYS = ["base", "overlays/servicemonitor", "overlays/podmonitor",
            "overlays/kubelet-socket", "overlays/mqtt", "overlays/web-config"]  # fmt: skip
# The web configuration with a PodMonitor instead: built from a kustomization written by the
# test, so the component's PodMonitor patch is rendered and checked too.
POD_MONITOR_WEB = "podmonitor+web-config"
CHECKOV = REPOSITORY / ".venv-checkov" / "bin" / "checkov"
NAMESPACE = "burstscope"
# The findings the DaemonSet keeps on purpose, each with its reason in a checkov.io/skip
# annotation: a new one has to be added here too, on purpose.
JUSTIFIED = {"CKV_K8S_11", "CKV_K8S_15", "CKV_K8S_19", "CKV_K8S_23", "CKV_K8S_25",
             "CKV_K8S_40", "CKV_K8S_43", "CKV2_K8S_6"}  # fmt: skip
JUSTIFIED_WITH_MQTT = JUSTIFIED | {"CKV_K8S_35"}

Document = dict[str, Any]


def load_generator() -> ModuleType:
    """deploy/kubernetes/generate.py, a script outside every package."""
    spec = importlib.util.spec_from_file_location("kubernetes_generate", KUSTOMIZE / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each overlay rendered by kubectl kustomize into a file of its own."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        # Not a Debian package here (Debian's kubernetes-client is 1.20, without kustomize 5).
        integration_unavailable("kubectl (1.32, kustomize 5.5 inside) is not installed")
        raise AssertionError("unreachable")
    directory = tmp_path_factory.mktemp("rendered")
    files = {}
    for overlay in OVERLAYS:
        result = subprocess.run(
            [kubectl, "kustomize", str(KUSTOMIZE / overlay)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, f"{overlay}: {result.stderr}"
        files[overlay] = directory / (overlay.replace("/", "-") + ".yaml")
        files[overlay].write_text(result.stdout)
    combined = tmp_path_factory.mktemp("combined")
    (combined / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # kustomize takes relative paths only.
                "resources": [os.path.relpath(KUSTOMIZE / "overlays/podmonitor", combined)],
                "components": [os.path.relpath(KUSTOMIZE / "components/web-config", combined)],
            }
        )
    )
    result = subprocess.run(
        [kubectl, "kustomize", str(combined)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    files[POD_MONITOR_WEB] = directory / "podmonitor-web-config.yaml"
    files[POD_MONITOR_WEB].write_text(result.stdout)
    return files


def documents(path: Path) -> list[Document]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def one(docs: list[Document], kind: str) -> Document:
    found = [document for document in docs if document["kind"] == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def agent_container(docs: list[Document]) -> Document:
    containers: list[Document] = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert [container["name"] for container in containers] == ["agent"]
    return containers[0]


# --- generated files -------------------------------------------------------------------------


def test_generated_files_are_current() -> None:
    generator = load_generator()
    for path, text in generator.generated().items():
        assert path.read_text() == text, f"{path} is stale: python deploy/kubernetes/generate.py"


def test_generator_check_names_stale_files_and_rewrites_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    generator = load_generator()
    monkeypatch.setattr(generator, "REPOSITORY", tmp_path)
    monkeypatch.setattr(generator, "RULES_OUTPUT", tmp_path / "rules.yaml")
    monkeypatch.setattr(generator, "DASHBOARDS_OUTPUT", tmp_path / "dashboards.yaml")
    (tmp_path / "rules.yaml").write_text("stale\n")
    assert generator.main(["--check"]) == 1
    assert capsys.readouterr().err == "stale: rules.yaml\nstale: dashboards.yaml\n"
    assert (tmp_path / "rules.yaml").read_text() == "stale\n"
    assert generator.main([]) == 0
    assert capsys.readouterr().err == "wrote: rules.yaml\nwrote: dashboards.yaml\n"
    assert generator.main(["--check"]) == 0
    assert capsys.readouterr().err == ""


def test_prometheus_rules_are_the_rules_files_and_dashboards_the_json() -> None:
    generator = load_generator()
    rules = documents(generator.RULES_OUTPUT)
    sources = sorted((REPOSITORY / "dashboards" / "prometheus").glob("*.rules.yml"))
    assert [rule["spec"]["groups"] for rule in rules] == [
        yaml.safe_load(path.read_text())["groups"] for path in sources
    ]
    dashboards = documents(generator.DASHBOARDS_OUTPUT)
    sources = sorted((REPOSITORY / "dashboards" / "grafana").glob("*.json"))
    assert [configmap["data"] for configmap in dashboards] == [
        {path.name: path.read_text()} for path in sources
    ]
    for configmap in dashboards:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        json.loads(next(iter(configmap["data"].values())))


# --- Kubernetes schemas, promtool, checkov ---------------------------------------------------


def kubernetes_validate(*arguments: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("kubernetes_validate") is None:
        integration_unavailable("kubernetes-validate is not installed (pip install -e '.[test]')")
    return subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", *arguments],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("version", ["1.25.0", "1.37.0"])
def test_every_overlay_passes_strict_validation(rendered: dict[str, Path], version: str) -> None:
    result = kubernetes_validate("-k", version, *map(str, rendered.values()))
    assert result.returncode == 0, result.stdout + result.stderr
    # It only warns on kinds it has no schema for: those must be the operator's three.
    unknown = set(re.findall(r"find schema for kind (\w+)", result.stdout + result.stderr))
    assert unknown == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def test_strict_validation_refuses_a_misspelt_field(
    rendered: dict[str, Path], tmp_path: Path
) -> None:
    daemonset = one(documents(rendered["base"]), "DaemonSet")
    daemonset["spec"]["template"]["spec"]["hostNetwrok"] = True
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(daemonset))
    result = kubernetes_validate("-k", "1.32.0", str(broken))
    assert result.returncode != 0
    assert "hostNetwrok" in result.stdout + result.stderr


def test_rule_groups_pass_promtool(rendered: dict[str, Path], tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    rules = [doc for doc in documents(rendered["overlays/servicemonitor"])
             if doc["kind"] == "PrometheusRule"]  # fmt: skip
    assert [rule["metadata"]["name"] for rule in rules] == ["burstscope-alerts",
                                                           "burstscope-recording"]  # fmt: skip
    paths = []
    for rule in rules:
        paths.append(tmp_path / f"{rule['metadata']['name']}.yml")
        paths[-1].write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run(
        [promtool, "check", "rules", *map(str, paths)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_checkov_finds_nothing_unjustified(rendered: dict[str, Path]) -> None:
    if not CHECKOV.exists():
        integration_unavailable(f"{CHECKOV} is missing (make test creates it)")
    directory = next(iter(rendered.values())).parent
    result = subprocess.run(
        [str(CHECKOV), "--skip-download", "--framework", "kubernetes", "-d", str(directory),
         "-o", "json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = json.loads(result.stdout)
    failed = [(check["check_id"], check["file_path"]) for check in report["results"].get(
        "failed_checks", [])]  # fmt: skip
    assert failed == [] and result.returncode == 0, failed
    assert report["summary"]["parsing_errors"] == 0
    skipped: dict[str, set[str]] = {}
    for check in report["results"]["skipped_checks"]:
        skipped.setdefault(Path(check["file_path"]).stem, set()).add(check["check_id"])
    assert skipped == {
        "base": JUSTIFIED,
        "overlays-servicemonitor": JUSTIFIED,
        "overlays-podmonitor": JUSTIFIED,
        "overlays-kubelet-socket": JUSTIFIED,
        "overlays-mqtt": JUSTIFIED_WITH_MQTT,
        "overlays-web-config": JUSTIFIED,
        "podmonitor-web-config": JUSTIFIED,
    }


def test_every_skip_gives_a_reason(rendered: dict[str, Path]) -> None:
    annotations = one(documents(rendered["overlays/mqtt"]), "DaemonSet")["metadata"]["annotations"]
    skips = {key: value for key, value in annotations.items() if key.startswith("checkov.io/")}
    # checkov splits the value at "=" into the check and the reason: one "=" only.
    reasons = dict(value.split("=") for value in skips.values())
    assert set(reasons) == JUSTIFIED_WITH_MQTT
    for check, reason in reasons.items():
        assert len(reason.split()) >= 10, f"{check}: say why ({reason!r})"


# --- prometheus-operator objects against the documented fields ------------------------------

# Documentation/api-reference/api.md (prometheus-operator v0.93). Each type: its fields, the
# required ones marked "!", the types of those the manifests use; a field documented but not
# used here is "any". Written from the reference, not from the operator's CRD files.
DURATION = re.compile(
    r"^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$"
)
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RELABEL_ACTIONS = {"replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
                   "lowercase", "uppercase", "keepequal", "dropequal"}  # fmt: skip
SCRAPE_ENDPOINT = {
    "port": "string", "targetPort": "any", "path": "string", "scheme": "scheme", "params": "any",
    "interval": "duration", "scrapeTimeout": "duration", "honorLabels": "bool",
    "honorTimestamps": "bool", "trackTimestampsStaleness": "any",
    "metricRelabelings": ["RelabelConfig"], "relabelings": ["RelabelConfig"],
    "filterRunning": "bool", "authorization": "any", "basicAuth": "BasicAuth", "oauth2": "any",
    "bearerTokenSecret": "any", "followRedirects": "bool", "enableHttp2": "bool",
    "proxyUrl": "any", "noProxy": "any", "proxyFromEnvironment": "any",
    "proxyConnectHeader": "any",
}  # fmt: skip
MONITOR_COMMON = {
    "jobLabel": "string", "podTargetLabels": ["string"], "selector!": "LabelSelector",
    "selectorMechanism": "any", "namespaceSelector": "NamespaceSelector",
    "sampleLimit": "int", "targetLimit": "int", "scrapeProtocols": "any",
    "fallbackScrapeProtocol": "any", "labelLimit": "int", "labelNameLengthLimit": "int",
    "labelValueLengthLimit": "int", "scrapeNativeHistograms": "any",
    "scrapeClassicHistograms": "any", "nativeHistogramBucketLimit": "any",
    "nativeHistogramMinBucketFactor": "any", "convertClassicHistogramsToNHCB": "any",
    "keepDroppedTargets": "int", "attachMetadata": "any", "scrapeClass": "string",
    "bodySizeLimit": "any",
}  # fmt: skip
OPERATOR_TYPES: dict[str, dict[str, Any]] = {
    "ServiceMonitorSpec": {**MONITOR_COMMON, "targetLabels": ["string"],
                           "endpoints!": ["Endpoint"], "serviceDiscoveryRole": "any"},
    "PodMonitorSpec": {**MONITOR_COMMON, "podMetricsEndpoints": ["PodMetricsEndpoint"]},
    "Endpoint": {**SCRAPE_ENDPOINT, "bearerTokenFile": "any", "tlsConfig": "TLSConfig"},
    "PodMetricsEndpoint": {**SCRAPE_ENDPOINT, "portNumber": "int", "tlsConfig": "SafeTLSConfig"},
    "SafeTLSConfig": {"ca": "SecretOrConfigMap", "cert": "SecretOrConfigMap",
                      "keySecret": "SecretKeySelector", "serverName": "string",
                      "insecureSkipVerify": "bool", "minVersion": "any", "maxVersion": "any"},
    "TLSConfig": {"ca": "SecretOrConfigMap", "cert": "SecretOrConfigMap",
                  "keySecret": "SecretKeySelector", "serverName": "string",
                  "insecureSkipVerify": "bool", "minVersion": "any", "maxVersion": "any",
                  "caFile": "string", "certFile": "string", "keyFile": "string"},
    "SecretOrConfigMap": {"secret": "SecretKeySelector", "configMap": "any"},
    "BasicAuth": {"username": "SecretKeySelector", "password": "SecretKeySelector"},
    # Kubernetes core/v1 SecretKeySelector.
    "SecretKeySelector": {"name": "string", "key!": "string", "optional": "bool"},
    "RelabelConfig": {"sourceLabels": ["labelname"], "separator": "string",
                      "targetLabel": "string", "regex": "string", "modulus": "int",
                      "replacement": "string", "action": "relabelaction"},
    "NamespaceSelector": {"any": "bool", "matchNames": ["string"]},
    "LabelSelector": {"matchLabels": "labels", "matchExpressions": "any"},
    "PrometheusRuleSpec": {"groups": ["RuleGroup"]},
    "RuleGroup": {"name!": "string", "labels": "labels", "interval": "duration",
                  "query_offset": "duration", "rules": ["Rule"],
                  "partial_response_strategy": "string", "limit": "int"},
    "Rule": {"record": "string", "alert": "string", "expr!": "string", "for": "duration",
             "keep_firing_for": "duration", "labels": "labels", "annotations": "labels"},
}  # fmt: skip
SPEC_TYPE = {"ServiceMonitor": "ServiceMonitorSpec", "PodMonitor": "PodMonitorSpec",
             "PrometheusRule": "PrometheusRuleSpec"}  # fmt: skip


def operator_errors(value: Any, kind: Any, where: str) -> Iterator[str]:
    """What in ``value`` the documented type ``kind`` does not allow, one line each."""
    if isinstance(kind, list):
        if not isinstance(value, list):
            yield f"{where}: a list expected"
            return
        for index, item in enumerate(value):
            yield from operator_errors(item, kind[0], f"{where}[{index}]")
        return
    simple = {"string": str, "bool": bool, "int": int}
    if kind == "any":
        return
    if kind in simple:
        if type(value) is not simple[kind]:
            yield f"{where}: {kind} expected, not {value!r}"
    elif kind == "duration":
        if not isinstance(value, str) or not value or not DURATION.match(value):
            yield f"{where}: {value!r} is not a Prometheus duration"
    elif kind == "labelname":
        if not isinstance(value, str) or not LABEL_NAME.match(value):
            yield f"{where}: {value!r} is not a label name"
    elif kind == "scheme":
        # api.md: "HTTP" and "HTTPS"; the CRD's enum also takes the lower case older
        # operators required.
        if value not in ("http", "https", "HTTP", "HTTPS"):
            yield f"{where}: scheme {value!r} is neither HTTP nor HTTPS"
    elif kind == "relabelaction":
        if str(value).lower() not in RELABEL_ACTIONS:
            yield f"{where}: unknown relabel action {value!r}"
    elif kind == "labels":
        if not isinstance(value, dict) or not all(
            isinstance(key, str) and isinstance(text, str) for key, text in value.items()
        ):
            yield f"{where}: a map of strings to strings expected"
    elif not isinstance(value, dict):
        yield f"{where}: an object ({kind}) expected"
    else:
        fields = {name.rstrip("!"): field for name, field in OPERATOR_TYPES[kind].items()}
        for name in OPERATOR_TYPES[kind]:
            if name.endswith("!") and name[:-1] not in value:
                yield f"{where}: {kind} requires {name[:-1]}"
        for name, item in value.items():
            if name not in fields:
                yield f"{where}.{name}: not a field of {kind}"
            else:
                yield from operator_errors(item, fields[name], f"{where}.{name}")
        if kind == "Rule" and ("record" in value) == ("alert" in value):
            yield f"{where}: a rule is either a record or an alert"


def operator_object_errors(document: Document) -> list[str]:
    errors = []
    if document.get("apiVersion") != "monitoring.coreos.com/v1":
        errors.append(f"{document['kind']}: apiVersion {document.get('apiVersion')!r}")
    if set(document) - {"apiVersion", "kind", "metadata", "spec"}:
        errors.append(f"{document['kind']}: unknown top-level fields")
    errors += operator_errors(document.get("spec"), SPEC_TYPE[document["kind"]], "spec")
    return errors


def test_operator_objects_have_only_documented_fields(rendered: dict[str, Path]) -> None:
    seen = set()
    for path in rendered.values():
        for document in documents(path):
            if document["kind"] in SPEC_TYPE:
                seen.add(document["kind"])
                assert operator_object_errors(document) == [], path.name
    assert seen == set(SPEC_TYPE)


def test_operator_schema_refuses_what_the_operator_would(rendered: dict[str, Path]) -> None:
    docs = documents(rendered["overlays/servicemonitor"])
    monitor = one(docs, "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    monitor["spec"]["endpoints"][0]["scheme"] = "ftp"
    monitor["spec"]["endpoints"][0]["scrapeTimeout"] = "10 seconds"
    monitor["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"
    del monitor["spec"]["selector"]
    rule = next(doc for doc in docs if doc["kind"] == "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["record"] = "both:record:and_alert"
    assert operator_object_errors(monitor) == [
        "spec: ServiceMonitorSpec requires selector",
        "spec.endpoints[0].relabelings[0].action: unknown relabel action 'rename'",
        "spec.endpoints[0].scrapeTimeout: '10 seconds' is not a Prometheus duration",
        "spec.endpoints[0].intervall: not a field of Endpoint",
        "spec.endpoints[0].scheme: scheme 'ftp' is neither HTTP nor HTTPS",
    ]
    assert operator_object_errors(rule) == [
        "spec.groups[0].rules[0]: a rule is either a record or an alert"
    ]


# --- what the manifests promise --------------------------------------------------------------


def test_the_agent_pod_is_what_the_readme_says(rendered: dict[str, Path]) -> None:
    docs = documents(rendered["base"])
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    container = agent_container(docs)
    host_sys = next(volume for volume in pod["volumes"] if volume["name"] == "host-sys")
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    version = re.search(r'^version = "(.+)"$', (REPOSITORY / "pyproject.toml").read_text(), re.M)
    assert version is not None
    actual = {
        "hostNetwork": pod["hostNetwork"],
        "priorityClassName": pod["priorityClassName"],
        "tolerations": pod["tolerations"],
        "host /sys": (host_sys["hostPath"]["path"], mounts["/host/sys"].get("readOnly")),
        "image": container["image"],
        "securityContext": container["securityContext"],
        "resources": container["resources"],
        "probes": {
            probe: (container[probe]["httpGet"]["path"], container[probe]["httpGet"]["port"])
            for probe in ("startupProbe", "livenessProbe", "readinessProbe")
        },
    }
    assert actual == {
        "hostNetwork": True,
        "priorityClassName": "system-node-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"},
                        {"key": "amd.com/gpu", "operator": "Exists"}],
        "host /sys": ("/sys", True),
        "image": f"ghcr.io/burstscope/burstscope:{version.group(1)}",
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            "capabilities": {"drop": ["ALL"], "add": ["SYS_NICE"]},
        },
        # No CPU limit: CFS throttling would stop the 1 ms sampler for the rest of a period.
        "resources": {"requests": {"cpu": "100m", "memory": "192Mi"},
                      "limits": {"memory": "1Gi"}},
        "probes": {"startupProbe": ("/-/healthy", "metrics"),
                   "livenessProbe": ("/-/healthy", "metrics"),
                   "readinessProbe": ("/-/ready", "metrics")},
    }  # fmt: skip


def config_mount(docs: list[Document]) -> tuple[Path, dict[str, str]]:
    """The agent's --config path and the files of the ConfigMap mounted there."""
    container = agent_container(docs)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    configmap = next(doc for doc in docs if doc["kind"] == "ConfigMap"
                     and doc["metadata"]["name"] == volume["configMap"]["name"])  # fmt: skip
    config = next(a for a in container["args"] if a.startswith("--config="))
    assert Path(config.removeprefix("--config=")).parent == Path(mount["mountPath"])
    return Path(config.removeprefix("--config=")), configmap["data"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agent_accepts_its_configuration_and_arguments(
    rendered: dict[str, Path], overlay: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    docs = documents(rendered[overlay])
    config, files = config_mount(docs)
    (tmp_path / config.name).write_text(files[config.name])
    status = main(["agent", "--check-config", str(tmp_path / config.name), "--offline"])
    assert status == 0, capsys.readouterr().err
    container = agent_container(docs)
    assert container["command"] == ["burstscope"]
    # The kubelet expands $(POD_IP) from the env entry of that name (Kubernetes API reference,
    # Container args); the node's address, under hostNetwork.
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        container["env"]
    )
    args = [arg.replace("$(POD_IP)", "10.0.0.7") for arg in container["args"]]
    parsed = build_parser().parse_args(args)
    assert (parsed.command, parsed.listen) == ("agent", "10.0.0.7:9847")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_in_the_namespace_and_selectors_meet(
    rendered: dict[str, Path], overlay: str
) -> None:
    docs = documents(rendered[overlay])
    for document in docs:
        if document["kind"] != "Namespace":
            assert document["metadata"].get("namespace") == NAMESPACE, document["metadata"]
    pod_labels = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    service = one(docs, "Service")
    assert service["spec"]["clusterIP"] == "None"
    port_names = {port["name"] for port in agent_container(docs)["ports"]}
    assert pod_labels.items() >= service["spec"]["selector"].items()
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= port_names
    for document in docs:
        if document["kind"] == "ServiceMonitor":
            selected = document["spec"]["selector"]["matchLabels"]
            assert service["metadata"]["labels"].items() >= selected.items()
            assert {e["port"] for e in document["spec"]["endpoints"]} <= {
                port["name"] for port in service["spec"]["ports"]
            }
        if document["kind"] == "PodMonitor":
            assert pod_labels.items() >= document["spec"]["selector"]["matchLabels"].items()
            assert {e["port"] for e in document["spec"]["podMetricsEndpoints"]} <= port_names


def test_the_kubelet_socket_overlay_mounts_the_socket_the_configuration_names(
    rendered: dict[str, Path],
) -> None:
    docs = documents(rendered["overlays/kubelet-socket"])
    config, files = config_mount(docs)
    socket = Path(re.findall(r'^kubelet_socket = "(.+)"$', files[config.name], re.M)[0])
    mounts = {m["name"]: m for m in agent_container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in one(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]}
    assert (mounts["pod-resources"]["mountPath"], mounts["pod-resources"]["readOnly"]) == (
        str(socket.parent),
        True,
    )
    assert volumes["pod-resources"]["hostPath"]["path"] == str(socket.parent)
    # The base leaves it out: no socket, no Kubernetes attribution, one log line.
    assert "pod-resources" not in {m["name"] for m in agent_container(
        documents(rendered["base"]))["volumeMounts"]}  # fmt: skip


def test_the_mqtt_overlay_keeps_the_spool_on_the_host(rendered: dict[str, Path]) -> None:
    docs = documents(rendered["overlays/mqtt"])
    config, files = config_mount(docs)
    spool = Path(re.findall(r'^spool_dir = "(.+)"$', files[config.name], re.M)[0])
    mounts = {m["name"]: m["mountPath"] for m in agent_container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in one(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]}
    assert spool.is_relative_to(mounts["state"])
    assert volumes["state"] == {
        "name": "state",
        "hostPath": {"path": "/var/lib/burstscope", "type": "DirectoryOrCreate"},
    }
    args = agent_container(docs)["args"]
    assert [arg for arg in args if arg.startswith("--mqtt")] == [
        "--mqtt=mqtts://mqtt.example.org:8883",
        "--mqtt-username=burstscope",
    ]


def test_the_web_config_overlays_serve_and_scrape_over_https(rendered: dict[str, Path]) -> None:
    from burstscope.collector.web_config import parse_web_config

    example = KUSTOMIZE / "components" / "web-config" / "web-config.yml.example"
    web = parse_web_config(example.read_text(), str(example))
    assert web.tls is not None and web.users
    for overlay, monitor_kind, endpoints in [
        ("overlays/web-config", "ServiceMonitor", "endpoints"),
        (POD_MONITOR_WEB, "PodMonitor", "podMetricsEndpoints"),
    ]:
        docs = documents(rendered[overlay])
        container = agent_container(docs)
        mount = next(m for m in container["volumeMounts"] if m["name"] == "web-config")
        flag = next(a for a in container["args"] if a.startswith("--web.config.file="))
        # The file and the certificate and key it names all come from the Secret's mount.
        for path in (flag.removeprefix("--web.config.file="), web.tls.cert_file, web.tls.key_file):
            assert Path(str(path)).parent == Path(mount["mountPath"]), path
        schemes = {container[p]["httpGet"].get("scheme") for p in
                   ("startupProbe", "livenessProbe", "readinessProbe")}  # fmt: skip
        assert schemes == {"HTTPS"}
        endpoint = one(docs, monitor_kind)["spec"][endpoints][0]
        service = one(docs, "Service")["metadata"]
        assert (endpoint["scheme"], endpoint["tlsConfig"]["serverName"]) == (
            "https",
            f"{service['name']}.{service['namespace']}.svc",
        )
        assert endpoint["basicAuth"] == {
            "username": {"name": "burstscope-scrape", "key": "username"},
            "password": {"name": "burstscope-scrape", "key": "password"},
        }
