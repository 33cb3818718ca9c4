"""deploy/ checked offline: Kubernetes manifests against the Kubernetes schemas, the compose file
against the compose-spec schema, the collector pipelines, the systemd unit, the Dockerfile, and
the wiring between them (ports, names, paths, settings) resolved the way ringtrace resolves them.

External pieces: ``kubernetes-validate`` (the Kubernetes JSON schemas) and ``check-jsonschema``
(ships the compose-spec schema) from PyPI; ``kubectl kustomize``, ``systemd-analyze`` and a Docker
engine are used where the machine has them and skipped (saying so) where it does not.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
import yaml

from ringtrace import cli
from ringtrace import config as config_mod
from ringtrace.config import Config
from tests._support.require import require

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
DOCKER = DEPLOY / "docker"
SYSTEMD = DEPLOY / "systemd"
OTEL = DEPLOY / "otel-collector"
PROM = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"
COMPOSE = DOCKER / "compose.yaml"
UNIT = SYSTEMD / "ringtrace.service"
DOCKERFILE = DOCKER / "Dockerfile"
IMAGE_CONFIG = DOCKER / "ringtrace.toml"  # baked into the image as /etc/ringtrace/ringtrace.toml
IMAGE_CONFIG_PATH = "/etc/ringtrace/ringtrace.toml"

# The oldest Kubernetes release still widely run and the newest the package ships schemas for.
K8S_VERSIONS = ("1.28", kubernetes_validate.utils.latest_version())
CRD_GROUPS = {"monitoring.coreos.com/v1": {"ServiceMonitor", "PodMonitor", "PrometheusRule"}}
SETTING_ENV = re.compile(r"\bRINGTRACE_([A-Z0-9_]+)\b")


# -- helpers ------------------------------------------------------------------------------------


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def k8s_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in k8s_files() for d in load_all(p)]


def k8s_one(kind: str, name: str) -> dict[str, Any]:
    found = [d for _, d in k8s_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name} in deploy/kubernetes, found {len(found)}"
    return found[0]


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, f"{workload['metadata']['name']}: no container {name}"
    one: dict[str, Any] = found[0]
    return one


def host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def is_builtin(doc: dict[str, Any]) -> bool:
    return doc["kind"] not in CRD_GROUPS.get(doc["apiVersion"], set())


def parse_quantity(q: str | int | float) -> float:
    """A Kubernetes resource quantity in base units (cores, bytes)."""
    s = str(q)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", s)
    assert m and m.group(2) in ("", *units), f"not a quantity: {q!r}"
    return float(m.group(1)) * units.get(m.group(2), 1.0)


def resolve_config(args: list[str], env: Mapping[str, str], files: Mapping[str, str], tmp: Path
                   ) -> tuple[Config, argparse.Namespace]:
    """The Config a ``ringtrace watch <args>`` process would run with: the real CLI parser, the
    container's ``RINGTRACE_*`` environment and the config files it would see (``files``: path in
    the container -> text).  Returns the config and the parsed arguments."""
    mapped: dict[str, str] = {}
    for i, (inside, text) in enumerate(sorted(files.items())):
        local = tmp / f"config{i}.toml"
        local.write_text(text, encoding="utf-8")
        mapped[inside] = str(local)
    ns, unknown = cli.build_parser().parse_known_args(["watch", *args])
    assert not unknown, f"`ringtrace watch` does not accept {unknown}"
    flags = {k: v for k, v in vars(ns).items() if k in config_mod.FIELDS}
    cfg_env = {k: v for k, v in env.items() if k.startswith(config_mod.ENV_PREFIX)}
    if "RINGTRACE_CONFIG" in cfg_env:
        assert cfg_env["RINGTRACE_CONFIG"] in files, f"RINGTRACE_CONFIG={cfg_env['RINGTRACE_CONFIG']} is no file there"
        cfg_env["RINGTRACE_CONFIG"] = mapped[cfg_env["RINGTRACE_CONFIG"]]
    config_file = getattr(ns, "config", None)
    if config_file:
        assert config_file in files, f"--config {config_file} is not a file the process can see"
        flags["config"] = mapped[config_file]
    return config_mod.build(flags, env=cfg_env), ns


def toml_settings(text: str, where: str) -> dict[str, Any]:
    data = tomllib.loads(text)
    unknown = sorted(set(data) - set(config_mod.FIELDS))
    assert not unknown, f"{where}: not ringtrace settings: {unknown}"
    return data


def env_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile (KEY=VALUE lines, # comments; no quoting used here)."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, eq, value = line.partition("=")
        assert eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), f"{path}: bad line {line!r}"
        out[key] = value
    return out


def collector(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def otlp_grpc_port(cfg: dict[str, Any]) -> int:
    endpoint = cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    return host_port(endpoint)[1]


def env_refs(text: str) -> set[str]:
    """``${env:NAME}`` references of a collector config."""
    return set(re.findall(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}", text))


# -- Kubernetes: schemas and kustomization -----------------------------------------------------


def test_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kust["resources"]
    on_disk = [p.name for p in k8s_files()]
    assert sorted(listed) == sorted(on_disk), "kustomization.yaml resources != the manifests in the folder"
    assert len(set(listed)) == len(listed), "a manifest is listed twice"
    assert kust["namespace"] == k8s_one("Namespace", kust["namespace"])["metadata"]["name"]
    images = {i["name"] for i in kust.get("images", [])}
    used = {c["image"].split(":")[0] for _, d in k8s_docs() if d["kind"] == "DaemonSet"
            for c in d["spec"]["template"]["spec"]["containers"]}
    assert images <= used, f"kustomization images {images - used} name no container image"


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("name", "doc"), [(n, d) for n, d in k8s_docs() if is_builtin(d)],
                         ids=lambda v: v if isinstance(v, str) else f"{v['kind']}/{v['metadata']['name']}")
def test_manifest_valid_against_kubernetes_schema(name: str, doc: dict[str, Any], version: str) -> None:
    # strict: unknown fields (a typo like `readOnlyRootFileSystem`) are errors too
    kubernetes_validate.validate(doc, version, strict=True)


def test_every_manifest_is_checked() -> None:
    """Built-in kinds go through the Kubernetes schemas; the only CRD, the ServiceMonitor, is
    checked structurally (test_servicemonitor_selects_the_ringtrace_service)."""
    crds = [(d["apiVersion"], d["kind"]) for _, d in k8s_docs() if not is_builtin(d)]
    assert crds == [("monitoring.coreos.com/v1", "ServiceMonitor")]
    for _, doc in k8s_docs():
        if is_builtin(doc):  # a schema exists for it (no SchemaNotFoundError)
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_schema_validation_is_not_vacuous() -> None:
    ds = json.loads(json.dumps(k8s_one("DaemonSet", "ringtrace")))
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSIONS[-1], strict=True)
    ds = json.loads(json.dumps(k8s_one("DaemonSet", "ringtrace")))
    ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9464"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSIONS[-1], strict=True)


def test_kustomize_build_renders_valid_objects() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: `kubectl kustomize` rendering not checked (the file list is)")
    res = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rendered = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert len(rendered) == len(k8s_docs())
    ns = yaml.safe_load((K8S / "kustomization.yaml").read_text())["namespace"]
    for doc in rendered:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == ns, doc["metadata"]["name"]
        if is_builtin(doc):
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


# -- Kubernetes: the Prometheus Operator CRD, checked structurally ------------------------------

DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
ENDPOINT_KEYS = {"port", "targetPort", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "honorTimestamps",
                 "relabelings", "metricRelabelings", "tlsConfig", "basicAuth", "authorization", "params",
                 "followRedirects", "enableHttp2", "filterRunning", "bearerTokenSecret", "oauth2", "proxyUrl",
                 "trackTimestampsStaleness"}


def seconds(duration: str) -> float:
    total = 0.0
    for n, unit in re.findall(r"([0-9]+)(ms|y|w|d|h|m|s)", duration):
        total += int(n) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}[unit]
    return total


def test_servicemonitor_selects_the_ringtrace_service() -> None:
    sm = k8s_one("ServiceMonitor", "ringtrace")
    svc = k8s_one("Service", "ringtrace")
    ds = k8s_one("DaemonSet", "ringtrace")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm["spec"]) <= {"selector", "endpoints", "namespaceSelector", "jobLabel", "targetLabels",
                               "podTargetLabels", "sampleLimit", "attachMetadata"}
    sel = sm["spec"]["selector"]["matchLabels"]
    assert sel.items() <= svc["metadata"]["labels"].items(), "the ServiceMonitor selects no Service"
    # without jobLabel the job is the Service name: the alert RingtraceExporterDown expects it
    alerts = (PROM / "ringtrace-alerts.yml").read_text()
    jobs = set(re.findall(r'up\{job="([^"]+)"\}', alerts))
    assert "jobLabel" not in sm["spec"] and jobs == {svc["metadata"]["name"]}
    # the Service reaches the DaemonSet's pods on the named metrics port
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items(), "the Service selects no ringtrace pod"
    port_names = {p["name"]: p for p in svc["spec"]["ports"]}
    c_ports = {p["name"]: p["containerPort"] for p in container(ds, "ringtrace")["ports"]}
    assert sm["spec"]["endpoints"], "no endpoint"
    for ep in sm["spec"]["endpoints"]:
        assert set(ep) <= ENDPOINT_KEYS, f"unknown ServiceMonitor endpoint keys {set(ep) - ENDPOINT_KEYS}"
        assert ep["port"] in port_names, f"endpoint port {ep['port']!r} is no port name of the Service"
        assert port_names[ep["port"]]["targetPort"] in c_ports, "the Service port targets no container port"
        assert ep.get("path", "/metrics") == "/metrics"
        assert ep.get("scheme", "http") == "http"  # the manifests serve plain HTTP (no --web-config)
        for key in ("interval", "scrapeTimeout"):
            assert DURATION.match(ep[key]) and ep[key] != "0", f"{key}: {ep[key]!r}"
        assert seconds(ep["scrapeTimeout"]) <= seconds(ep["interval"])
        for r in ep.get("relabelings", []):
            assert all(s.startswith("__meta_kubernetes_") or LABEL_NAME.match(s) for s in r["sourceLabels"])
            assert LABEL_NAME.match(r["targetLabel"])


# -- Kubernetes: the ringtrace DaemonSet -----------------------------------------------------------


def daemonset_config(tmp_path: Path) -> tuple[Config, argparse.Namespace]:
    ds = k8s_one("DaemonSet", "ringtrace")
    c = container(ds, "ringtrace")
    env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
    env.setdefault("RINGTRACE_CONFIG", IMAGE_CONFIG_PATH)  # the image's ENV
    files = {IMAGE_CONFIG_PATH: IMAGE_CONFIG.read_text()}
    # the ConfigMap volume replaces the image's /etc/ringtrace
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    for m in c["volumeMounts"]:
        cm = vols[m["name"]].get("configMap")
        if cm:
            data = k8s_one("ConfigMap", cm["name"])["data"]
            files = {p: t for p, t in files.items() if not p.startswith(m["mountPath"].rstrip("/") + "/")}
            files.update({f"{m['mountPath'].rstrip('/')}/{key}": text for key, text in data.items()})
    assert "command" not in c, "command would replace the image's ENTRYPOINT (ringtrace watch)"
    return resolve_config(c["args"], env, files, tmp_path)


def mount_of(ds: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume mount holding ``path`` (the longest mountPath prefix)."""
    mounts = container(ds, "ringtrace")["volumeMounts"]
    best = [m for m in mounts if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert best, f"{path} is on no volume (the root file system is read-only)"
    return max(best, key=lambda m: len(m["mountPath"]))


def test_configmap_settings_are_valid_ringtrace_settings() -> None:
    data = k8s_one("ConfigMap", "ringtrace-config")["data"]
    assert list(data) == ["ringtrace.toml"]
    settings = toml_settings(data["ringtrace.toml"], "ConfigMap ringtrace-config")
    cfg = config_mod.build(settings, env={})
    for key, value in settings.items():
        got = getattr(cfg, key)
        assert got == (tuple(value) if isinstance(value, list) else value), key


def test_image_default_settings_are_valid() -> None:
    settings = toml_settings(IMAGE_CONFIG.read_text(), str(IMAGE_CONFIG))
    cfg = config_mod.build(settings, env={})
    assert host_port(cfg.metrics_addr) == ("0.0.0.0", 9464)


def test_daemonset_effective_config_matches_ports_volumes_and_probes(tmp_path: Path) -> None:
    ds = k8s_one("DaemonSet", "ringtrace")
    c = container(ds, "ringtrace")
    cfg, ns = daemonset_config(tmp_path)
    # the ConfigMap really is the file read (values not given as flags come from it)
    cm = tomllib.loads(k8s_one("ConfigMap", "ringtrace-config")["data"]["ringtrace.toml"])
    assert cfg.log_format == cm["log_format"] == "json" and cfg.series_ttl == cm["series_ttl"]
    # metrics: reachable from the kubelet and Prometheus (not loopback), on the probed port
    host, port = host_port(cfg.metrics_addr)
    assert host in ("0.0.0.0", "::"), f"metrics on {host}: probes and scrapes come from outside the pod"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        probe_port = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
        assert probe_port == port, f"{probe} on {probe_port}, metrics served on {port}"
        assert get.get("scheme", "HTTP") == ("HTTPS" if cfg.web_config else "HTTP")
    svc = k8s_one("Service", "ringtrace")
    assert {ports.get(p["targetPort"], p["targetPort"]) for p in svc["spec"]["ports"]} == {port}
    # watched paths: on a read-only hostPath; state: on a writable volume
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    for path in ns.paths:
        m = mount_of(ds, path)
        assert m.get("readOnly") is True and "hostPath" in vols[m["name"]], f"{path}: not a read-only hostPath"
    assert cfg.state_dir, "no --state-dir"
    m = mount_of(ds, cfg.state_dir)
    assert not m.get("readOnly") and ("emptyDir" in vols[m["name"]] or "hostPath" in vols[m["name"]])


def test_daemonset_security_and_resources() -> None:
    for name, cname in (("ringtrace", "ringtrace"), ("otel-agent", "otel-agent")):
        ds = k8s_one("DaemonSet", name)
        pod = ds["spec"]["template"]["spec"]
        c = container(ds, cname)
        psc, sc = pod.get("securityContext", {}), c["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0 and sc["runAsNonRoot"] is True
        assert psc["seccompProfile"]["type"] == "RuntimeDefault"
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc.get("privileged", False) is False and sc["capabilities"]["drop"] == ["ALL"]
        assert "add" not in sc["capabilities"]
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        assert pod["automountServiceAccountToken"] is False
        assert all("hostPort" not in p for p in c["ports"])
        req, lim = c["resources"]["requests"], c["resources"]["limits"]
        for res in ("cpu", "memory"):
            assert parse_quantity(req[res]) <= parse_quantity(lim[res]), f"{name}: {res} request > limit"
        assert c["livenessProbe"] and c["readinessProbe"]
        for v in pod["volumes"]:
            if "hostPath" in v:
                assert name == "ringtrace" and all(m["readOnly"] for m in c["volumeMounts"] if m["name"] == v["name"])
    # the node name comes from the downward API and labels every span
    c = container(k8s_one("DaemonSet", "ringtrace"), "ringtrace")
    env = c["env"]
    node = next(e for e in env if e["name"] == "NODE_NAME")
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    attrs = next(e for e in env if e["name"] == "OTEL_RESOURCE_ATTRIBUTES")
    assert "host.name=$(NODE_NAME)" in attrs["value"] and "k8s.node.name=$(NODE_NAME)" in attrs["value"]
    # $(VAR) expands only variables defined earlier in the list
    for i, e in enumerate(env):
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", e.get("value", "")):
            assert ref in {x["name"] for x in env[:i]}, f"{e['name']}: $({ref}) is not defined before it"


def test_ringtrace_sends_traces_to_the_node_agent(tmp_path: Path) -> None:
    cfg, _ = daemonset_config(tmp_path)
    url = urlparse(cfg.otlp_endpoint)
    agent = collector(OTEL / "agent.yaml")
    svc = k8s_one("Service", "otel-agent")
    ds = k8s_one("DaemonSet", "otel-agent")
    assert cfg.otlp_protocol == "grpc" and "grpc" in agent["receivers"]["otlp"]["protocols"]
    assert url.scheme == "http", "plain gRPC to the agent on the node (no TLS configured on its receiver)"
    assert url.hostname in (svc["metadata"]["name"], f"{svc['metadata']['name']}.ringtrace.svc")
    assert svc["spec"].get("internalTrafficPolicy") == "Local", "traffic must stay on the node"
    sp = next(p for p in svc["spec"]["ports"] if p["port"] == url.port)
    c_ports = {p["name"]: p["containerPort"] for p in container(ds, "otel-agent")["ports"]}
    assert c_ports[sp["targetPort"]] == otlp_grpc_port(agent)
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_kubernetes_agent_config_is_the_shipped_agent_yaml() -> None:
    cm = k8s_one("ConfigMap", "otel-agent-config")
    assert cm["data"]["agent.yaml"] == (OTEL / "agent.yaml").read_text(), (
        "deploy/kubernetes/otel-agent-config.yaml differs from deploy/otel-collector/agent.yaml: copy it over")
    ds = k8s_one("DaemonSet", "otel-agent")
    c = container(ds, "otel-agent")
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert f"--config={mount['mountPath']}/agent.yaml" in c["args"]
    defined = {e["name"] for e in c.get("env", [])}
    assert env_refs(cm["data"]["agent.yaml"]) <= defined, "the agent config reads an unset variable"


# -- settings named anywhere ------------------------------------------------------------------


def deploy_texts() -> Iterator[tuple[Path, str]]:
    for folder in (K8S, DOCKER, SYSTEMD, OTEL):
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                yield p, p.read_text(encoding="utf-8")


def test_every_ringtrace_variable_names_a_setting() -> None:
    seen: dict[str, Path] = {}
    for path, text in deploy_texts():
        for suffix in SETTING_ENV.findall(text):
            name = suffix.lower()
            assert name in config_mod.FIELDS or name == "config", (
                f"{path.relative_to(ROOT)}: RINGTRACE_{suffix} is no ringtrace setting")
            seen[suffix] = path
    assert len(seen) >= 5, f"expected the deploy files to use settings variables, found {sorted(seen)}"


def test_systemd_environment_file_is_valid() -> None:
    env = env_file(SYSTEMD / "ringtrace.env")
    cfg = config_mod.build({}, env=env)
    assert host_port(cfg.metrics_addr)[0] == "0.0.0.0"
    url = urlparse(cfg.otlp_endpoint)
    assert cfg.otlp_protocol == "grpc" and url.port == otlp_grpc_port(collector(OTEL / "agent.yaml"))
    assert url.hostname in ("127.0.0.1", "localhost"), "the systemd setup sends to the agent on the same node"


# -- OpenTelemetry Collector ------------------------------------------------------------------

SECTIONS = {"receivers": "receivers", "processors": "processors", "exporters": "exporters"}


def check_pipelines(path: Path) -> None:
    """Every component a pipeline names is defined, every defined one is used, memory_limiter first."""
    name = path.name
    cfg = collector(path)
    service = cfg["service"]
    for ext in service.get("extensions", []):
        assert ext in cfg.get("extensions", {}), f"{name}: extension {ext} is not defined"
    used: dict[str, set[str]] = {s: set() for s in SECTIONS}
    assert service["pipelines"], f"{name}: no pipeline"
    for pname, pipe in service["pipelines"].items():
        assert pname.split("/")[0] in ("traces", "metrics", "logs"), pname
        for section in SECTIONS:
            names = pipe.get(section, [])
            if section != "processors":
                assert names, f"{name}: pipeline {pname} has no {section}"
            for comp in names:
                assert comp in (cfg.get(section) or {}), f"{name}: {pname} uses undefined {section[:-1]} {comp}"
                used[section].add(comp)
        procs = pipe.get("processors", [])
        assert procs and procs[0] == "memory_limiter", f"{name}: memory_limiter must come first"
        assert "batch" in procs, f"{name}: no batch processor"
    for section in SECTIONS:
        unused = set(cfg.get(section) or {}) - used[section]
        assert not unused, f"{name}: {section} defined but in no pipeline: {unused}"
    # every exporter endpoint comes from the environment (set by compose / the DaemonSet)
    for exp in cfg["exporters"].values():
        assert re.fullmatch(r"\$\{env:[A-Z_]+\}", exp["endpoint"]), exp["endpoint"]
    ml = cfg["processors"]["memory_limiter"]
    assert ml["spike_limit_mib"] < ml["limit_mib"]


@pytest.mark.parametrize("name", ["agent.yaml", "gateway.yaml"])
def test_collector_pipelines_reference_defined_components(name: str) -> None:
    check_pipelines(OTEL / name)


def test_collector_check_is_not_vacuous(tmp_path: Path) -> None:
    """The pipeline check fails on a pipeline naming an undefined exporter, or an unused processor."""
    broken = collector(OTEL / "agent.yaml")
    broken["service"]["pipelines"]["traces"]["exporters"].append("otlp/typo")
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(broken))
    with pytest.raises(AssertionError, match="undefined exporter otlp/typo"):
        check_pipelines(tmp_path / "typo.yaml")
    unused = collector(OTEL / "agent.yaml")
    unused["service"]["pipelines"]["traces"]["processors"].remove("batch")
    (tmp_path / "unused.yaml").write_text(yaml.safe_dump(unused))
    with pytest.raises(AssertionError):
        check_pipelines(tmp_path / "unused.yaml")


def test_gateway_receives_what_the_agent_exports() -> None:
    agent, gateway = collector(OTEL / "agent.yaml"), collector(OTEL / "gateway.yaml")
    assert list(agent["exporters"]) == ["otlp/gateway"]  # OTLP over gRPC
    assert "grpc" in gateway["receivers"]["otlp"]["protocols"]
    k8s_env = {e["name"]: e["value"] for e in container(k8s_one("DaemonSet", "otel-agent"), "otel-agent")["env"]}
    assert host_port(k8s_env["OTEL_GATEWAY_ENDPOINT"])[1] == otlp_grpc_port(gateway)


# -- docker compose ---------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def compose_schema() -> dict[str, Any]:
    ref = importlib.resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    schema: dict[str, Any] = json.loads(ref.read_text(encoding="utf-8"))
    return schema


def interpolate(value: str) -> str:
    """Compose interpolation with every variable unset: ``${X:-default}`` -> default; a bare ``${X}``
    would make the file depend on the user's environment, so it is an error here."""
    def sub(m: re.Match[str]) -> str:
        assert m.group(2) is not None, f"{value!r}: ${{{m.group(1)}}} has no default"
        return m.group(3)
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-(.*?))?\}", sub, value)


def test_compose_file_valid_against_compose_spec() -> None:
    schema = compose_schema()
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    validator = validator_cls(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose())]
    assert not errors, "\n".join(errors)
    # and the validator does reject a broken file (not a schema that accepts anything)
    broken = compose()
    broken["services"]["ringtrace"]["read_only"] = "yes please"
    broken["services"]["ringtrace"]["volumes"][0]["readonly"] = True
    assert len(list(validator.iter_errors(broken))) >= 2


def service_mounts(svc: dict[str, Any]) -> list[tuple[str, str, bool, str]]:
    """(type, source, read_only, target) of each volume of a compose service."""
    out = []
    for v in svc.get("volumes", []):
        if isinstance(v, str):
            parts = v.split(":")
            src, target = parts[0], parts[1]
            ro = len(parts) > 2 and "ro" in parts[2].split(",")
            kind = "bind" if src.startswith((".", "/", "$", "~")) else "volume"
        else:
            kind, src, target, ro = v["type"], v.get("source", ""), v["target"], bool(v.get("read_only"))
        out.append((kind, interpolate(src), ro, target))
    return out


def test_compose_mounts_and_builds_only_files_in_the_repo() -> None:
    doc = compose()
    checked = 0
    for name, svc in doc["services"].items():
        for kind, src, _, target in service_mounts(svc):
            if kind == "bind":
                p = (COMPOSE.parent / src).resolve()
                assert p.exists(), f"{name}: mounts {src} (-> {target}), which is not in the repository"
                assert ROOT in p.parents, f"{name}: {src} is outside the repository"
                checked += 1
            else:
                assert src in doc.get("volumes", {}), f"{name}: named volume {src} is not declared"
        build = svc.get("build")
        if build:
            ctx = (COMPOSE.parent / build["context"]).resolve()
            assert (ctx / build["dockerfile"]).resolve() == DOCKERFILE
    assert checked >= 8


def test_compose_images_are_pinned() -> None:
    for name, svc in compose()["services"].items():
        image = svc["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and "/" not in tag, f"{name}: image {image} is not pinned to a tag"


def compose_ringtrace(tmp_path: Path) -> tuple[Config, argparse.Namespace, dict[str, Any]]:
    svc = compose()["services"]["ringtrace"]
    env = {k: interpolate(str(v)) for k, v in svc["environment"].items()}
    env.setdefault("RINGTRACE_CONFIG", IMAGE_CONFIG_PATH)
    cfg, ns = resolve_config(svc["command"], env, {IMAGE_CONFIG_PATH: IMAGE_CONFIG.read_text()}, tmp_path)
    return cfg, ns, svc


def test_compose_ringtrace_wiring(tmp_path: Path) -> None:
    doc = compose()
    services = doc["services"]
    cfg, ns, svc = compose_ringtrace(tmp_path)
    host, port = host_port(cfg.metrics_addr)
    assert host == "0.0.0.0"
    published = {int(p.rsplit(":", 1)[1]) for p in svc["ports"]}
    assert published == {port}
    for p in svc["ports"]:
        assert p.startswith("127.0.0.1:"), f"{p}: publish on the laptop's loopback only"
    # hardening and mounts
    assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"] and "no-new-privileges:true" in svc["security_opt"]
    assert not svc["user"].startswith(("0:", "root"))
    mounts = {target: (kind, ro) for kind, _, ro, target in service_mounts(svc)}
    for path in ns.paths:
        assert mounts[path] == ("bind", True), f"{path}: not a read-only bind mount"
    assert mounts[cfg.state_dir] == ("volume", False)
    # Prometheus scrapes it with the job name the alerts expect
    prom_cfg = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    job = next(j for j in prom_cfg["scrape_configs"] if j["job_name"] == "ringtrace")
    assert [t for sc in job["static_configs"] for t in sc["targets"]] == [f"ringtrace:{port}"]
    # OTLP to the agent, which forwards to the gateway, which forwards to Jaeger
    url = urlparse(cfg.otlp_endpoint)
    agent, gateway = collector(OTEL / "agent.yaml"), collector(OTEL / "gateway.yaml")
    assert cfg.otlp_protocol == "grpc" and url.hostname == "otel-agent" and url.port == otlp_grpc_port(agent)
    for svc_name, name, var, target in (("otel-agent", "agent.yaml", "OTEL_GATEWAY_ENDPOINT", "otel-gateway"),
                                        ("otel-gateway", "gateway.yaml", "TRACE_BACKEND_ENDPOINT", "jaeger")):
        s = services[svc_name]
        cfg_mount = next(t for _, src, _, t in service_mounts(s) if src.endswith(f"otel-collector/{name}"))
        assert f"--config={cfg_mount}" in s["command"]
        assert env_refs((OTEL / name).read_text()) <= set(s["environment"])
        h, p = host_port(s["environment"][var])
        assert h == target and h in services
        if target == "otel-gateway":
            assert p == otlp_grpc_port(gateway)
        else:
            assert p == 4317  # Jaeger v2's OTLP/gRPC receiver


def test_compose_prometheus_loads_the_shipped_rules(tmp_path: Path) -> None:
    svc = compose()["services"]["prometheus"]
    mounts = {target: src for _, src, _, target in service_mounts(svc)}
    config_target = next(a.split("=", 1)[1] for a in svc["command"] if a.startswith("--config.file="))
    assert (COMPOSE.parent / mounts[config_target]).resolve() == DOCKER / "prometheus.yml"
    prom_cfg = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    shipped = sorted(PROM.glob("ringtrace-*.yml"))
    local_rules = []
    for rule_file in prom_cfg["rule_files"]:
        assert rule_file in mounts, f"rule file {rule_file} is not mounted"
        local_rules.append((COMPOSE.parent / mounts[rule_file]).resolve())
    assert sorted(local_rules) == shipped, "compose's Prometheus must load exactly deploy/prometheus/ringtrace-*.yml"
    # promtool checks the config with the rule paths pointing at the repository's files
    exe = shutil.which("promtool")
    require(exe is not None, "promtool not installed (Debian package prometheus)")
    assert exe is not None
    prom_cfg["rule_files"] = [str(p) for p in local_rules]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_cfg))
    res = subprocess.run([exe, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_compose_grafana_provisions_the_shipped_dashboards() -> None:
    services = compose()["services"]
    svc = services["grafana"]
    mounts = {target: (COMPOSE.parent / src).resolve() for kind, src, _, target in service_mounts(svc)
              if kind == "bind"}
    prov = "/etc/grafana/provisioning"
    assert mounts[f"{prov}/dashboards"] == DOCKER / "grafana-provisioning" / "dashboards"
    assert mounts[f"{prov}/datasources"] == DOCKER / "grafana-provisioning" / "datasources"
    providers = yaml.safe_load((DOCKER / "grafana-provisioning/dashboards/ringtrace.yaml").read_text())["providers"]
    folder = providers[0]["options"]["path"]
    provided = sorted(p for t, p in mounts.items() if t.startswith(folder + "/") and t.endswith(".json"))
    assert provided == sorted(GRAFANA.glob("*.json")), "every shipped dashboard, and only those"
    home = svc["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home in mounts and home.startswith(folder + "/")
    sources = yaml.safe_load((DOCKER / "grafana-provisioning/datasources/ringtrace.yaml").read_text())["datasources"]
    prom = next(d for d in sources if d["type"] == "prometheus")
    assert prom["isDefault"] is True  # the dashboards' `datasource` variable picks the default
    assert urlparse(prom["url"]).hostname == "prometheus" and urlparse(prom["url"]).port == 9090
    jaeger = next(d for d in sources if d["type"] == "jaeger")
    assert urlparse(jaeger["url"]).hostname == "jaeger" and "127.0.0.1:16686:16686" in services["jaeger"]["ports"]


# -- systemd ------------------------------------------------------------------------------------


def unit_entries(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections as lists of (key, value); repeated keys kept in order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        assert current is not None and "=" in line, f"bad unit line {raw!r}"
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def test_systemd_unit_is_hardened(tmp_path: Path) -> None:
    sections = unit_entries(UNIT.read_text())
    svc: dict[str, list[str]] = {}
    for key, value in sections["Service"]:
        svc.setdefault(key, []).append(value)

    def one(key: str) -> str:
        assert key in svc, f"{key}= missing"
        return svc[key][-1]

    assert one("DynamicUser") == "yes" or one("User") not in ("", "root", "0")
    assert one("ProtectSystem") == "strict"
    assert one("ProtectHome") in ("yes", "read-only", "tmpfs")
    for key in ("NoNewPrivileges", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules",
                "ProtectControlGroups", "RestrictSUIDSGID", "LockPersonality", "RestrictNamespaces"):
        assert one(key) == "yes", key
    assert one("CapabilityBoundingSet") == "" and one("AmbientCapabilities") == ""
    assert set(one("RestrictAddressFamilies").split()) <= {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    assert "@system-service" in svc["SystemCallFilter"][0].split()
    assert one("Restart") == "on-failure" and "2" in one("RestartPreventExitStatus").split()
    assert one("EnvironmentFile").lstrip("-") == "/etc/ringtrace/ringtrace.env"
    assert one("KillSignal") == "SIGTERM" and int(one("TimeoutStopSec").rstrip("s")) > 5  # sinks get 4.5 s
    # ExecStart: accepted by the real CLI; watched paths read-only; state in StateDirectory
    argv = shlex.split(one("ExecStart"))
    assert argv[0].startswith("/") and argv[1] == "watch"
    env = env_file(SYSTEMD / "ringtrace.env")
    cfg, ns = resolve_config(argv[2:], env, {}, tmp_path)
    ro = one("ReadOnlyPaths").split()
    for path in ns.paths:
        assert any(path == r or path.startswith(r.rstrip("/") + "/") for r in ro), f"{path} not in ReadOnlyPaths="
    assert cfg.state_dir == f"/var/lib/{one('StateDirectory')}"
    assert sections["Install"] == [("WantedBy", "multi-user.target")]


def systemd_analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze not installed (no systemd on this machine): the unit is only parsed")
    return exe


def unit_copy(tmp_path: Path, text: str) -> Path:
    """The unit with ExecStart's binary pointed at this environment's ringtrace (verify checks it exists)."""
    exe = Path(sys.executable).parent / "ringtrace"
    assert exe.exists(), f"{exe}: ringtrace is not installed in this environment"
    out = tmp_path / "ringtrace.service"
    out.write_text(text.replace("/opt/ringtrace/bin/ringtrace", str(exe)))
    return out


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    exe = systemd_analyze()
    unit = unit_copy(tmp_path, UNIT.read_text())
    res = subprocess.run([exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert not re.search(r"Unknown|ignoring|Failed|not executable|Invalid", out), out
    # a typo in a hardening key is reported: the check above is not vacuous
    typo = unit_copy(tmp_path, UNIT.read_text().replace("ProtectSystem=strict", "ProtectSytem=strict"))
    res = subprocess.run([exe, "verify", "--man=no", str(typo)], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert "Unknown key" in res.stdout + res.stderr


def test_systemd_analyze_security_exposure(tmp_path: Path) -> None:
    exe = systemd_analyze()
    unit = unit_copy(tmp_path, UNIT.read_text())
    res = subprocess.run([exe, "security", "--offline=yes", "--no-pager", str(unit)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path, env={**os.environ, "SYSTEMD_COLORS": "0"})
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", res.stdout + res.stderr)
    assert m, res.stdout + res.stderr
    assert float(m.group(1)) <= 2.0, f"exposure {m.group(1)} (0 safest .. 10 unsafe):\n{res.stdout}"


# -- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile_static() -> None:
    ins = dockerfile_instructions()
    args = {}
    for op, rest in ins:
        if op == "ARG" and "=" in rest:
            k, _, v = rest.partition("=")
            args[k] = v
    stages: set[str] = set()
    froms = [rest for op, rest in ins if op == "FROM"]
    assert froms
    for rest in froms:
        parts = rest.split()
        image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], parts[0])
        if image not in stages:
            name, _, digest = image.partition("@")
            repo, _, tag = name.rpartition(":")
            assert repo and tag and tag != "latest", f"FROM {image}: no pinned tag"
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"FROM {image}: no sha256 digest"
            assert "slim" in tag or "alpine" in tag or "distroless" in repo, f"FROM {image}: not a slim base"
        if len(parts) == 3 and parts[1].upper() == "AS":
            stages.add(parts[2])
    final = ins[max(i for i, (op, _) in enumerate(ins) if op == "FROM"):]
    users = [rest for op, rest in final if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), "the final stage must switch to a non-root USER"
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["ringtrace", "watch"]
    # COPY sources exist and the Dockerfile's ignore file lets them into the context
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    allowed = [p[1:].rstrip("/") for p in ignore if p.startswith("!")]
    for op, rest in ins:
        if op == "COPY" and "--from=" not in rest:
            for src in rest.split()[:-1]:
                assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
                assert src.rstrip("/") in allowed, f"COPY {src}: excluded by Dockerfile.dockerignore"
    # the health check probes the port the image's settings serve on
    health = dict(final)["HEALTHCHECK"]
    port = host_port(config_mod.build(toml_settings(IMAGE_CONFIG.read_text(), "image"), env={}).metrics_addr)[1]
    assert f"127.0.0.1:{port}/healthz" in health
    env_line = dict(final)["ENV"]
    assert f"RINGTRACE_CONFIG={IMAGE_CONFIG_PATH}" in env_line
    assert any(op == "COPY" and rest.split()[-1] == IMAGE_CONFIG_PATH for op, rest in final)


def context_files() -> list[str]:
    """Tracked files that Dockerfile.dockerignore lets into the build context."""
    allowed = [p[1:].rstrip("/") for p in (DOCKER / "Dockerfile.dockerignore").read_text().split() if p.startswith("!")]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in tracked if any(f == a or f.startswith(a + "/") for a in allowed)]


def test_image_build_steps_without_an_engine(tmp_path: Path) -> None:
    """What the build stage does, outside a container: build ringtrace from exactly the files the
    context holds, install it, and run the image's command with the image's settings file."""
    ctx = tmp_path / "ctx"
    for f in context_files():
        (ctx / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, ctx / f)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "wheel"), str(ctx)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    wheel = next((tmp_path / "wheel").glob("ringtrace-*.whl"))
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    env = {**os.environ, "PYTHONPATH": str(site), "RINGTRACE_CONFIG": str(IMAGE_CONFIG),
           # the image's 0.0.0.0:9464, on a free loopback port here
           "RINGTRACE_METRICS_ADDR": "127.0.0.1:0", "RINGTRACE_STATE_DIR": str(tmp_path / "state")}
    where = subprocess.run([sys.executable, "-c", "import ringtrace; print(ringtrace.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr
    (tmp_path / "state").mkdir()
    run = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(ROOT / "tests/fixtures/samples"), "--once"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert any((tmp_path / "state").iterdir()), "--state-dir from the image's settings was not used"


def test_image_settings_file_turns_on_json_logs(tmp_path: Path) -> None:
    env = {**os.environ, "RINGTRACE_CONFIG": str(IMAGE_CONFIG), "RINGTRACE_METRICS_ADDR": "127.0.0.1:0",
           "RINGTRACE_STATE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(ROOT / "tests/fixtures/samples"), "--once"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert lines, "log_level = info in the image's settings, yet nothing was logged"
    for line in lines:
        assert isinstance(json.loads(line), dict), f"not a JSON log line: {line!r}"


def test_dockerfile_builds(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client: the Dockerfile is only checked statically")
    info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        pytest.skip("no Docker engine reachable (this machine has the docker client only): "
                    "the Dockerfile is only checked statically")
    tag = "ringtrace:test-manifests"
    res = subprocess.run([docker, "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)], capture_output=True,
                         text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    run = subprocess.run([docker, "run", "--rm", "--read-only", "--entrypoint", "ringtrace", tag, "--help"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    user = subprocess.run([docker, "image", "inspect", "-f", "{{.Config.User}}", tag], capture_output=True,
                          text=True, timeout=60)
    assert user.stdout.strip() not in ("", "0", "root", "0:0")


def test_kubernetes_alertmanager_config_is_the_shipped_one(tmp_path: Path) -> None:
    """The Secret's alertmanager.yaml is deploy/alertmanager/alertmanager.yml, and amtool accepts it."""
    [doc] = [d for d in yaml.safe_load_all((K8S / "alertmanager-config.yaml").read_text()) if d]
    text = doc["stringData"]["alertmanager.yaml"]
    shipped = (K8S.parent / "alertmanager" / "alertmanager.yml").read_text()
    assert text == shipped
    require(shutil.which("amtool") is not None, "amtool not installed (Debian package prometheus-alertmanager)")
    (tmp_path / "alertmanager.yml").write_text(text)
    res = subprocess.run(["amtool", "check-config", str(tmp_path / "alertmanager.yml")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
