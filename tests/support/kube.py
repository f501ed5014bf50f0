"""Render deploy/ with ``kubectl kustomize`` and walk the objects, for
tests/project/test_deploy.py."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Every kustomization the tests render, relative to deploy/.
KUSTOMIZATIONS = ("base", "overlays/cpu", "overlays/gpu", "data")
POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")

Obj = dict[str, Any]


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not on PATH: it renders deploy/ (kubectl kustomize); "
                    "install kubectl >= 1.27 to run these checks")
    return path


@functools.cache
def _render(kustomization: str) -> tuple[Obj, ...]:
    proc = subprocess.run([kubectl(), "kustomize", str(DEPLOY / kustomization)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, f"kubectl kustomize deploy/{kustomization} failed:\n{proc.stderr}"
    objects = tuple(o for o in yaml.safe_load_all(proc.stdout) if o)
    assert objects, f"kubectl kustomize deploy/{kustomization} rendered nothing"
    return objects


def render(kustomization: str) -> list[Obj]:
    return list(_render(kustomization))


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(obj: Obj) -> Obj | None:
    if obj["kind"] == "Pod":
        return dict(obj["spec"])
    if obj["kind"] in POD_TEMPLATE_KINDS:
        return dict(obj["spec"]["template"]["spec"])
    return None


def containers(obj: Obj) -> Iterator[tuple[Obj, Obj]]:
    """(pod spec, container) for every container and init container of a workload."""
    spec = pod_spec(obj)
    if spec is None:
        return
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        yield spec, c


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def env_paths(tree: dict[str, Any], prefix: str = "CONVEYOR") -> set[str]:
    """CONVEYOR_<PATH> for every leaf key of a config tree: redis.tls.ca_file is
    CONVEYOR_REDIS_TLS_CA_FILE."""
    names: set[str] = set()
    for key, value in tree.items():
        name = f"{prefix}_{key.upper()}"
        names |= env_paths(value, name) if isinstance(value, dict) else {name}
    return names
